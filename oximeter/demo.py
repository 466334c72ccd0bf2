"""``oximeter demo``: the simulated fleet, a gateway per engine and traffic, watched live.

Every child process is started through ``ManagedProcess`` and stopped on exit, on errors and
on Ctrl-C during set-up.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

from rich.console import Console
from rich.live import Live
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from oximeter.live_view import GatewayWatch, render
from oximeter.procs import ManagedProcess, free_port, http_ok, oximeter_argv

DEFAULT_WORKSPACE = Path(".oximeter/demo")


@dataclass
class Stack:
    """The demo's child processes, stopped in reverse start order."""

    workspace: Path
    processes: list[ManagedProcess] = field(default_factory=list)

    def start(self, name: str, argv: list[str], ready_url: str | None, timeout_s: float = 60.0) -> None:
        """Start ``name`` and, when ``ready_url`` is given, wait until it answers 2xx."""
        proc = ManagedProcess(name, argv, self.workspace / "logs").start()
        self.processes.append(proc)
        if ready_url is not None:
            proc.wait_ready(lambda: http_ok(ready_url), timeout_s)

    def stop(self) -> None:
        """Stop every process; safe to call more than once."""
        for proc in reversed(self.processes):
            proc.stop()


def configure(parser: argparse.ArgumentParser) -> None:
    """Add ``demo`` arguments."""
    parser.add_argument("--nodes", type=int, default=2, help="simulated nodes (one engine and gateway each)")
    parser.add_argument("--duration", type=float, default=None, help="seconds to run (default: until Ctrl-C)")
    parser.add_argument("--day-seconds", type=float, default=120.0,
                        help="one simulated day of traffic shape in this many seconds")
    parser.add_argument("--base-rps", type=float, default=6.0, help="mean requests per second per gateway")
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


def run(args: argparse.Namespace) -> int:
    """Start the stack, show it live until Ctrl-C or ``--duration``, then stop everything."""
    console = Console()
    args.workspace.mkdir(parents=True, exist_ok=True)
    stack = Stack(args.workspace)
    with _sigterm_as_interrupt():
        try:
            gateways = _start(stack, args, console)
            _watch(gateways, args.duration, console)
        except KeyboardInterrupt:
            console.print("[yellow]interrupted[/]")
        finally:
            stack.stop()
            console.print(f"stopped every process; logs in {args.workspace / 'logs'}")
    return 0


def _start(stack: Stack, args: argparse.Namespace, console: Console) -> list[GatewayWatch]:
    sim_port = free_port()
    engine_ports = [sim_port + i for i in range(args.nodes)]
    gateways: list[GatewayWatch] = []
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                  console=console, transient=False) as progress:
        task = progress.add_task(f"simulator: {args.nodes} nodes from port {sim_port}", total=None)
        stack.start("simulator", oximeter_argv("sim", "serve", "--port", str(sim_port),
                                               "--nodes", str(args.nodes)),
                    f"http://127.0.0.1:{engine_ports[-1]}/health")
        progress.update(task, description=f"simulator: {args.nodes} engines on ports {engine_ports}", total=1,
                        completed=1)
        for i, engine_port in enumerate(engine_ports, start=1):
            node = f"n{i}"
            port = free_port()
            task = progress.add_task(f"gateway {node} on :{port}", total=None)
            stack.start(f"gateway-{node}", oximeter_argv(
                "gateway", "--upstream", f"http://127.0.0.1:{engine_port}", "--port", str(port),
                "--service", "chat", "--node", node, "--max-concurrency", "8", "--max-queue", "32",
                "--max-queue-wait", "5"), f"http://127.0.0.1:{port}/health/ready")
            progress.update(task, total=1, completed=1)
            gateways.append(GatewayWatch(node, f"http://127.0.0.1:{port}"))
        task = progress.add_task("traffic generator", total=None)
        targets = [arg for g in gateways for arg in ("--target", g.url)]
        stack.start("traffic", oximeter_argv("traffic", *targets, "--base-rps", str(args.base_rps),
                                             "--day-seconds", str(args.day_seconds)), None)
        progress.update(task, total=1, completed=1)
    console.print("[bold]SIMULATION[/]: engines and GPUs are simulated; the gateways are the real code.")
    for g in gateways:
        console.print(f"  gateway {g.node}: {g.url}/v1/chat/completions  metrics: {g.url}/metrics")
    return gateways


def _watch(gateways: list[GatewayWatch], duration_s: float | None, console: Console) -> None:
    deadline = None if duration_s is None else time.monotonic() + duration_s
    with Live(render(gateways), console=console, refresh_per_second=2) as live:
        while deadline is None or time.monotonic() < deadline:
            for g in gateways:
                g.poll()
            live.update(render(gateways))
            time.sleep(1.0)
