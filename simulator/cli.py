"""``oximeter sim serve | fault | history``: the simulated fleet, its faults and its history."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import get_args

import requests
from loguru import logger

from oximeter.config import load_section
from oximeter.errors import ConfigError
from oximeter.inputs import cli_type, parse_epoch_s
from oximeter.secrets import read_secret
from simulator.admin import TOKEN_ENV
from simulator.defaults import EngineKnobs
from simulator.fault_kinds import FAULT_KINDS
from simulator.scenario import Telemetry
from simulator.settings import SimSettings


def _knob(field: str) -> tuple[str, type, str]:
    """An engine knob's flag: its type and help are the knob's own."""
    info = EngineKnobs.model_fields[field]
    assert isinstance(info.annotation, type) and info.description, field
    return field, info.annotation, info.description


_SERVE_FLAGS = {
    # flag -> (settings field, type, help)
    "--host": ("host", str, "bind address (default 127.0.0.1)"),
    "--port": ("port", int, "port of node n1's engine; node i listens on port+i-1"),
    "--nodes": ("nodes", int, "number of simulated nodes (one engine each)"),
    "--gpus-per-node": ("gpus_per_node", int, "simulated GPUs per node"),
    "--max-num-seqs": _knob("max_num_seqs"),
    "--model": ("model", str, "model name served and reported as model_name"),
    "--seed": ("seed", int, "random seed (GPU identities, noise)"),
    "--prefill-s-per-token": _knob("prefill_s_per_token"),
    "--decode-s-per-token": _knob("decode_s_per_token"),
    "--decode-batch-factor": _knob("decode_batch_factor"),
    "--kv-blocks": _knob("kv_blocks"),
    "--telemetry": ("telemetry", str, "oximeter (default) or stock: engines serve only vLLM's own series"),
    "--block-tokens": _knob("block_tokens"),
    "--prefix-hit-rate": _knob("prefix_hit_rate"),
    "--default-output-tokens": (
        "default_output_tokens",
        int,
        "output length when a request sets no max_tokens",
    ),
    "--dependency-latency-s": _knob("dependency_latency_s"),
}


def configure(parser: argparse.ArgumentParser) -> None:
    """Add ``serve``, ``fault`` and ``history``."""
    sub = parser.add_subparsers(dest="sim_command", metavar="SUBCOMMAND")
    serve = sub.add_parser("serve", help="run the simulated fleet (engines, GPUs, admin API)")
    for flag, (_field, kind, text) in _SERVE_FLAGS.items():
        serve.add_argument(flag, type=kind, default=None, help=text)
    serve.add_argument("--port-file", help="write the engines' ports there as JSON {node: port} once "
                       "they listen (with --port 0 the kernel picks each)")
    serve.set_defaults(func=run_serve)

    fault = sub.add_parser("fault", help=f"inject, list or delete faults (token from {TOKEN_ENV})")
    fault.add_argument(
        "kind",
        nargs="?",
        choices=sorted(FAULT_KINDS),
        metavar="KIND",
        help=f"fault kind: {', '.join(FAULT_KINDS)}",
    )
    fault.add_argument("--url", required=True, help="any port of the simulator, e.g. http://127.0.0.1:8100")
    fault.add_argument("--node", help="target node, e.g. n1")
    fault.add_argument("--gpu", type=int, default=None, help="target GPU index (GPU faults)")
    fault.add_argument("--link", type=int, default=None, help="target NVLink of the GPU (NVLink faults)")
    fault.add_argument("--start", type=float, default=None, help="simulation-clock start (default: now)")
    fault.add_argument("--duration", type=float, default=None, help="seconds (default: until deleted)")
    fault.add_argument("--strength", type=float, default=None, help="kind-specific strength")
    fault.add_argument("--id", default=None, help="fault id (default: generated)")
    fault.add_argument("--list", action="store_true", help="list faults instead of injecting one")
    fault.add_argument("--delete", metavar="ID", help="delete fault ID instead of injecting one")
    fault.set_defaults(func=run_fault)

    history = sub.add_parser("history", help="write a scenario's history as OpenMetrics and Parquet")
    history.add_argument("--scenario", required=True, help="scenario YAML file")
    history.add_argument("--days", type=float, default=1.0, help="simulated days")
    history.add_argument("--step", default="15s", help="sample step, e.g. 15s or 1m")
    history.add_argument("--out", required=True, help="output directory")
    history.add_argument(
        "--end",
        type=cli_type(parse_epoch_s, "--end"),
        default=None,
        help="epoch seconds of the last sample (default: now, rounded to the step)",
    )
    add_trace_flags(history, "replace the scenario's traffic with this arrival trace (CSV: timestamp, "
                             "prompt and output tokens)")
    history.add_argument("--telemetry", choices=get_args(Telemetry), default=None,
                         help="what the fleet presents (default: the scenario's): Oximeter's gateway and "
                         "exporter, or stock (no gateway, dcgm-exporter's default fields, vLLM's and "
                         "kube-state-metrics' own series)")
    history.set_defaults(func=run_history)


def add_trace_flags(parser: argparse.ArgumentParser | argparse._ArgumentGroup, text: str) -> None:
    """``--trace FILE`` and ``--trace-peak-utilisation`` (traffic, sim history, drill)."""
    parser.add_argument("--trace", metavar="FILE", default=None, help=text)
    parser.add_argument("--trace-peak-utilisation", type=float, default=0.6, metavar="U",
                        help="with --trace: load in the trace's busiest minute, at the busiest hour, as "
                             "a share of the fleet's capacity (default 0.6)")


def _settings(args: argparse.Namespace) -> SimSettings:
    base = load_section("sim", SimSettings, args.config)
    overrides = {
        f: getattr(args, flag.lstrip("-").replace("-", "_")) for flag, (f, _k, _t) in _SERVE_FLAGS.items()
    }
    return base.model_copy(update={k: v for k, v in overrides.items() if v is not None})


def run_serve(args: argparse.Namespace) -> int:
    """Start the fleet and serve until SIGINT/SIGTERM."""
    from simulator.clock import RealClock
    from simulator.fleet import Fleet
    from simulator.server import build_server, serve

    try:
        settings = SimSettings.model_validate(_settings(args).model_dump())
        token = read_secret(TOKEN_ENV)
    except (ConfigError, ValueError) as exc:
        print(f"oximeter sim serve: {exc}", file=sys.stderr)
        return 2
    if token is None:
        logger.warning("{} is not set: the admin API (faults, release) refuses every request", TOKEN_ENV)
    params = settings.engine_params()
    fleet = Fleet(
        RealClock(),
        nodes=settings.nodes,
        gpus_per_node=settings.gpus_per_node,
        params=params,
        model_name=settings.model,
        seed=settings.seed,
        dependency_latency_s=settings.dependency_latency_s,
    )
    server = build_server(
        fleet, settings.host, settings.port, token, settings.default_output_tokens, wall_origin_s=time.time(),
        stock=settings.telemetry == "stock",
    )
    print(
        f"*** SIMULATION: oximeter sim serve — {settings.nodes} simulated vLLM engines, "
        f"{settings.gpus_per_node} simulated GPUs each; nothing here is a real engine or GPU ***",
        file=sys.stderr,
        flush=True,
    )
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    asyncio.run(serve(server, args.port_file))
    return 0


def run_fault(args: argparse.Namespace) -> int:
    """Talk to ``/admin/faults`` with the token from the environment."""
    token = read_secret(TOKEN_ENV)
    if token is None:
        print(f"oximeter sim fault: set {TOKEN_ENV} (or {TOKEN_ENV}_FILE)", file=sys.stderr)
        return 2
    headers = {"Authorization": f"Bearer {token.get_secret_value()}"}
    base = args.url.rstrip("/")
    try:
        if args.list:
            resp = requests.get(f"{base}/admin/faults", headers=headers, timeout=10)
        elif args.delete:
            resp = requests.delete(f"{base}/admin/faults/{args.delete}", headers=headers, timeout=10)
        else:
            if not args.kind or not args.node:
                print("oximeter sim fault: KIND and --node are required", file=sys.stderr)
                return 2
            body = {
                "kind": args.kind,
                "node": args.node,
                "gpu": args.gpu,
                "link": args.link,
                "start": args.start,
                "duration_s": args.duration,
                "strength": args.strength,
                "id": args.id,
            }
            resp = requests.post(
                f"{base}/admin/faults",
                headers=headers,
                timeout=10,
                json={k: v for k, v in body.items() if v is not None},
            )
    except requests.RequestException as exc:
        print(f"oximeter sim fault: cannot reach {base}: {exc.__class__.__name__}", file=sys.stderr)
        return 1
    print(json.dumps(resp.json(), indent=2) if resp.content else resp.status_code)
    return 0 if resp.ok else 1


def run_history(args: argparse.Namespace) -> int:
    """Write a scenario's history (see simulator/history.py)."""
    from simulator.history import main as history_main

    return history_main(args)
