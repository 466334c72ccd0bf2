"""``oximeter demo``: the local stack (``oximeter/stack.py``) with a simulated fleet, watched live.

Every child process is started by the stack and stopped on exit, on errors and on Ctrl-C or
SIGTERM during set-up. Issue 8 grows this into the drill (analyzer, chat sink, digest).
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

from rich.console import Console
from rich.live import Live
from rich.progress import Progress, SpinnerColumn, TaskID, TextColumn, TimeElapsedColumn

from oximeter.backfill import BackfillSpec
from oximeter.live_view import GatewayWatch, render
from oximeter.stack import Endpoints, Stack, StackError, StackOptions

DEFAULT_WORKSPACE = Path(".oximeter/demo")


def configure(parser: argparse.ArgumentParser) -> None:
    """Add ``demo`` arguments."""
    parser.add_argument("--nodes", type=int, default=2, help="simulated nodes (one engine and gateway each)")
    parser.add_argument("--gpus-per-node", type=int, default=2, help="simulated GPUs per node")
    parser.add_argument("--duration", type=float, default=None, help="seconds to run (default: until Ctrl-C)")
    parser.add_argument("--day-seconds", type=float, default=86400.0,
                        help="one simulated day of traffic shape in this many seconds")
    parser.add_argument("--base-rps", type=float, default=1.0, help="mean requests per second per gateway")
    parser.add_argument("--backfill-days", type=float, default=0.0,
                        help="days of simulated history backfilled into Prometheus first (0 = none)")
    parser.add_argument("--workspace", type=Path, default=DEFAULT_WORKSPACE)
    parser.set_defaults(func=run)


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    def handler(_signum: int, _frame: FrameType | None) -> None:
        raise KeyboardInterrupt
    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class _ProgressObserver:
    """One progress line per start step."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress
        self.tasks: dict[str, TaskID] = {}

    def step(self, name: str, detail: str) -> None:
        self.tasks[name] = self.progress.add_task(detail, total=None)

    def done(self, name: str) -> None:
        self.progress.update(self.tasks[name], total=1, completed=1)


def options_from(args: argparse.Namespace) -> StackOptions:
    """The stack the demo runs."""
    backfill = None
    if args.backfill_days > 0:
        backfill = BackfillSpec(nodes=args.nodes, gpus_per_node=args.gpus_per_node, base_rps=args.base_rps,
                                days=args.backfill_days)
    return StackOptions(nodes=args.nodes, gpus_per_node=args.gpus_per_node, backfill=backfill,
                        traffic_rps_per_node=args.base_rps, day_seconds=args.day_seconds)


def run(args: argparse.Namespace) -> int:
    """Start the stack, show it live until Ctrl-C or ``--duration``, then stop everything."""
    console = Console()
    args.workspace.mkdir(parents=True, exist_ok=True)
    progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                        console=console)
    stack = Stack(args.workspace, options_from(args), _ProgressObserver(progress))
    with _sigterm_as_interrupt():
        try:
            with progress:
                endpoints = stack.start()
            _print_endpoints(endpoints, console)
            watches = [GatewayWatch(node, url) for node, url in endpoints.gateways.items()]
            _watch(watches, args.duration, console)
        except StackError as exc:
            console.print(f"[red]oximeter demo: {exc}[/]")
            return 1
        except KeyboardInterrupt:
            console.print("[yellow]interrupted[/]")
        finally:
            stack.stop()
            console.print(f"stopped every process; logs in {stack.workspace / 'logs'}")
    return 0


def _print_endpoints(ep: Endpoints, console: Console) -> None:
    console.print("[bold]SIMULATION[/]: engines and GPUs are simulated; gateways, exporters, Prometheus "
                  "and Alertmanager are the real thing.")
    console.print(f"  Prometheus:   {ep.prometheus}/alerts")
    if ep.alertmanager:
        console.print(f"  Alertmanager: {ep.alertmanager}")
    for node, url in ep.gateways.items():
        console.print(f"  gateway {node}: {url}/v1/chat/completions  metrics: {url}/metrics  "
                      f"exporter: {ep.exporters[node]}/metrics")
    console.print("  dashboards JSON: dashboards/build/")


def _watch(gateways: list[GatewayWatch], duration_s: float | None, console: Console) -> None:
    deadline = None if duration_s is None else time.monotonic() + duration_s
    with Live(render(gateways), console=console, refresh_per_second=2) as live:
        while deadline is None or time.monotonic() < deadline:
            for g in gateways:
                g.poll()
            live.update(render(gateways))
            time.sleep(1.0)
