"""Gateway overhead: the same load straight at the simulator and through the gateway, in one run.

Prints, for non-streaming and streaming requests at a fixed concurrency, the throughput ratio
(gateway / direct) and the added p50/p99 latency. Direct and gateway rounds alternate so drift on
a shared machine hits both. Targets: ratio ≥ 0.9, added p50 ≤ 1 ms.

    .venv/bin/python bench/gateway_overhead.py [--requests 1000] [--concurrency 32] [--rounds 3]

To compare two gateway versions in the same conditions, put each version's ``gateway/`` folder in
a directory and run from outside the repository root (``-m`` puts the working directory first on
``sys.path``) with ``PYTHONPATH`` naming it; the child processes inherit it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psutil

from simulator.load_shape import RequestMix
from simulator.traffic import RequestBuilder, Result, closed_loop
from stack.ports import wait_port, wait_ports
from stack.procs import ManagedProcess, http_ok, oximeter_argv

MODEL = "bench-model"


@dataclass(frozen=True)
class Run:
    """Throughput and latency percentiles of one measured batch."""

    rps: float
    p50_ms: float
    p99_ms: float
    errors: int


def summarise(results: list[Result], wall_s: float) -> Run:
    """Requests per second and latency percentiles of successful requests."""
    latencies = sorted(r.latency_s for r in results if r.status == 200)
    cuts = statistics.quantiles(latencies, n=100, method="inclusive")
    return Run(len(latencies) / wall_s, cuts[49] * 1e3, cuts[98] * 1e3, sum(r.status != 200 for r in results))


def measure(url: str, stream: bool, args: argparse.Namespace) -> Run:
    """One closed-loop batch of ``args.requests`` requests at ``args.concurrency``."""
    builder = RequestBuilder(RequestMix(model=MODEL, shared_prefix_ratio=0.0), seed=1)

    def make() -> object:
        return builder.build(
            stream=stream, output_tokens=args.output_tokens, prompt_tokens=args.prompt_tokens
        )

    results, wall_s = asyncio.run(closed_loop(url, make, args.concurrency, args.requests))  # type: ignore[arg-type]
    return summarise(results, wall_s)


def median_run(runs: list[Run]) -> Run:
    """Element-wise median over rounds."""
    return Run(
        statistics.median(r.rps for r in runs),
        statistics.median(r.p50_ms for r in runs),
        statistics.median(r.p99_ms for r in runs),
        sum(r.errors for r in runs),
    )


def cpu_s(proc: ManagedProcess) -> float:
    """User + system CPU seconds used so far by ``proc``."""
    assert proc.proc is not None
    times = psutil.Process(proc.proc.pid).cpu_times()
    return float(times.user + times.system)


def scenario(decode_s: float, args: argparse.Namespace, tmp: Path) -> None:
    """One simulator + gateway pair; alternating direct/gateway rounds; one table row per mode."""
    sim_ports, gw_port_file = tmp / f"simulator-{decode_s}.port", tmp / f"gateway-{decode_s}.port"
    sim = ManagedProcess(
        f"simulator-{decode_s}",
        oximeter_argv(
            "--log-level",
            "WARNING",
            "sim",
            "serve",
            "--port",
            "0",
            "--port-file",
            str(sim_ports),
            "--nodes",
            "1",
            "--model",
            MODEL,
            "--max-num-seqs",
            str(4 * args.concurrency),
            "--decode-s-per-token",
            str(decode_s),
            "--decode-batch-factor",
            "0",
            "--prefill-s-per-token",
            "0",
        ),
        tmp,
    )
    with sim:
        sim_url = f"http://127.0.0.1:{wait_ports(sim, sim_ports)['n1']}"
        gateway = ManagedProcess(
            f"gateway-{decode_s}",
            oximeter_argv(
                "--log-level",
                args.gateway_log_level,
                "--log-format",
                "json",  # as deployed, and as the recorded numbers were measured
                "gateway",
                "--upstream",
                sim_url,
                "--port",
                "0",
                "--port-file",
                str(gw_port_file),
                "--max-concurrency",
                str(2 * args.concurrency),
                "--max-queue",
                str(8 * args.concurrency),
            ),
            tmp,
        )
        with gateway:
            gw_url = f"http://127.0.0.1:{wait_port(gateway, gw_port_file)}"
            sim.wait_ready(lambda: http_ok(f"{sim_url}/health"))
            gateway.wait_ready(lambda: http_ok(f"{gw_url}/health/ready"))
            for stream in (False, True):
                warm = argparse.Namespace(**{**vars(args), "requests": args.concurrency * 4})
                for url in (sim_url, gw_url):  # open connections and warm caches once per mode
                    measure(url, stream, warm)
                direct_runs: list[Run] = []
                gateway_runs: list[Run] = []
                gateway_cpu_s = 0.0
                for _ in range(args.rounds):
                    direct_runs.append(measure(sim_url, stream, args))
                    before = cpu_s(gateway)
                    gateway_runs.append(measure(gw_url, stream, args))
                    gateway_cpu_s += cpu_s(gateway) - before
                d, g = median_run(direct_runs), median_run(gateway_runs)
                cpu_us = gateway_cpu_s / (args.rounds * args.requests) * 1e6
                print(
                    f"| {decode_s * 1e3:g} ms | {'streaming' if stream else 'non-streaming'} | {d.rps:.0f} "
                    f"| {g.rps:.0f} | {g.rps / d.rps:.3f} | {d.p50_ms:.2f} | {g.p50_ms - d.p50_ms:+.2f} "
                    f"| {d.p99_ms:.2f} | {g.p99_ms - d.p99_ms:+.2f} | {cpu_us:.0f} | {d.errors + g.errors} |",
                    flush=True,
                )


def main() -> int:
    """Print the comparison table for each engine pace."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1000, help="requests per round, mode and target")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3, help="alternating direct/gateway rounds (median)")
    parser.add_argument("--output-tokens", type=int, default=16)
    parser.add_argument("--prompt-tokens", type=int, default=64)
    parser.add_argument(
        "--decode-s-per-token",
        type=float,
        action="append",
        default=None,
        help="simulated decode seconds per token, repeatable (default: 0.01 and 0, "
        "i.e. an engine-paced run and an instant engine that makes the run CPU-bound)",
    )
    parser.add_argument(
        "--gateway-log-level", default="INFO", help="INFO logs 4 lines a request, as deployed"
    )
    args = parser.parse_args()
    paces = args.decode_s_per_token or [0.01, 0.0]
    print(
        f"# concurrency {args.concurrency}, {args.requests} requests x {args.rounds} rounds per cell "
        f"(median), {args.output_tokens} output tokens, gateway log level {args.gateway_log_level}, "
        # The machine may be shared: the load says how much the numbers can be trusted.
        f"load average at start {os.getloadavg()[0]:.2f}"
    )
    print(
        "| decode/token | mode | direct rps | gateway rps | ratio | direct p50 ms | added p50 ms "
        "| direct p99 ms | added p99 ms | gateway CPU µs/req | errors |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for pace in paces:
            scenario(pace, args, Path(tmp))
    return 0


if __name__ == "__main__":
    sys.exit(main())
