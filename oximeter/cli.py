"""The ``oximeter`` command: one console script, subcommands imported only when chosen.

Lazy imports keep ``oximeter --help`` instant and let ``oximeter exporter`` run on a GPU host
with only the exporter's small set of dependencies.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from oximeter import __version__
from oximeter.errors import OximeterError
from oximeter.logs import add_logging_arguments, setup_logging

# name -> (module with configure(parser), one-line description). Each module's configure() adds
# its arguments (or its own sub-commands) and sets ``func`` (args -> exit code) as a default.
COMMANDS: dict[str, tuple[str, str]] = {
    "gateway": ("gateway.cli", "run the instrumented serving front for one engine replica"),
    "sim": ("simulator.cli", "simulated vLLM engines and GPU fleet: serve, fault, history"),
    "traffic": ("simulator.traffic", "generate OpenAI-API traffic with a compressed daily shape"),
    "config": ("stack.config_cli", "check a configuration file"),
    "dashboards": ("dashboards.cli", "build the Grafana dashboards JSON from grafanalib sources"),
    "rules": ("analyzer.signals.recording_rules",
              "generate the signal recording rules, the adapters' plain translations and the "
              "Kubernetes rule objects"),
    "detect": ("analyzer.service.detect_cli", "detect anomalies in a CSV or Parquet series offline"),
    "exporter": ("exporter.cli", "export GPU (NVML or simulated) and external queue metrics"),
    "outbox": ("reporter.outbox_cli", "list pending or failed chat notifications"),
    "demo": ("stack.demo", "run the whole stack on localhost with a simulated fleet"),
    "incidents": ("analyzer.service.incidents_cli", "list, show, acknowledge, silence and resolve incidents"),
    "maintenance": ("analyzer.service.maintenance_cli",
                    "declare maintenance windows: detection goes on, chat is quiet"),
    "analyze": ("stack.analyze", "run the analyzer daemon: detect, correlate, store, notify"),
    "report": ("reporter.digest_cli", "send or preview the daily health digest"),
    "store": ("oximeter.store_cli", "check the shared store's integrity, or back it up while in use"),
    "drill": ("drills.cli",
              "rehearse a fault scenario against the stack or in replay, and score the diagnosis"),
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The top-level parser; only ``command``'s module is imported to configure its sub-parser."""
    parser = argparse.ArgumentParser(
        prog="oximeter",
        description="Observability and layer-attributed alerting for GPU LLM inference services.",
    )
    parser.add_argument("--version", action="version", version=f"oximeter {__version__}")
    parser.add_argument("--config", default=None, help="YAML configuration file (default: ./oximeter.yaml)")
    add_logging_arguments(parser)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module_name, summary) in COMMANDS.items():
        sub = subparsers.add_parser(name, help=summary, description=summary)
        if name == command:
            importlib.import_module(module_name).configure(sub)
    return parser


def _chosen_command(argv: Sequence[str]) -> str | None:
    skip_next = False
    for arg in argv:
        if skip_next:
            skip_next = False
            continue
        if arg in ("--config", "--log-level", "--log-format"):
            skip_next = True
            continue
        if not arg.startswith("-"):
            return arg if arg in COMMANDS else None
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``oximeter`` console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(_chosen_command(argv))
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        # A command group called without its sub-command: show that group's help.
        if args.command is None:
            parser.print_help()
            return 2
        parser.parse_args([*argv, "--help"])
        return 2
    if not getattr(args, "configures_logging", False):
        setup_logging(args.log_level, json=args.log_format == "json", component=args.command)
    try:
        return int(func(args) or 0)
    except OximeterError as exc:
        # The last line of defence: an error raised on purpose names its input; never a traceback.
        print(f"oximeter {args.command}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
