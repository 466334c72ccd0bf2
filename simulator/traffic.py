"""``oximeter traffic``: OpenAI chat traffic with a compressed daily shape, bounded in count and time.

The request builder and the async HTTP client here are also the load core of
``bench/gateway_overhead.py``, so the benchmark and the demo drive engines the same way.
Only loopback targets are accepted: this is a test and demo tool, never a load test of a real host.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from urllib.parse import urlsplit

import aiohttp

from oximeter.errors import ConfigError
from simulator.load_shape import RequestMix, daily_rate

CHAT = "/v1/chat/completions"
LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})
_WORDS = (
    "gpu",
    "queue",
    "token",
    "batch",
    "cache",
    "prefill",
    "decode",
    "kernel",
    "node",
    "latency",
    "tensor",
    "stream",
    "model",
    "engine",
    "memory",
    "shard",
)
@dataclass(frozen=True)
class PreparedRequest:
    """One request ready to send: the encoded body and whether it streams."""

    path: str
    body: bytes
    stream: bool


def _text(rng: random.Random, tokens: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(max(1, tokens)))


def _lognormal(rng: random.Random, median: int, sigma: float) -> int:
    return max(1, round(rng.lognormvariate(math.log(median), sigma)))


def scaled_mix(mix: RequestMix, prompt_scale: float) -> RequestMix:
    """``mix`` with its prompts and shared system prompts ``prompt_scale`` times as long (at least a
    token each)."""
    if prompt_scale == 1.0:
        return mix
    return replace(mix, prompt_tokens_median=max(1, round(mix.prompt_tokens_median * prompt_scale)),
                   shared_prefix_tokens=max(1, round(mix.shared_prefix_tokens * prompt_scale)))


class RequestBuilder:
    """Draws requests from a ``RequestMix`` with a seeded generator (reproducible runs)."""

    def __init__(self, mix: RequestMix, seed: int = 0) -> None:
        self.mix = mix
        self._rng = random.Random(seed)
        prefix_rng = random.Random(seed + 1)
        self._prefixes = [_text(prefix_rng, mix.shared_prefix_tokens) for _ in range(mix.shared_prefixes)]

    def build(
        self,
        *,
        stream: bool | None = None,
        output_tokens: int | None = None,
        prompt_tokens: int | None = None,
    ) -> PreparedRequest:
        """One chat request; explicit arguments pin what the benchmark needs fixed."""
        mix, rng = self.mix, self._rng
        if stream is None:
            stream = rng.random() < mix.stream_ratio
        if output_tokens is None:
            output_tokens = min(
                mix.max_output_tokens, _lognormal(rng, mix.output_tokens_median, mix.length_sigma)
            )
        if prompt_tokens is None:
            prompt_tokens = _lognormal(rng, mix.prompt_tokens_median, mix.length_sigma)
        messages = []
        if self._prefixes and rng.random() < mix.shared_prefix_ratio:
            messages.append({"role": "system", "content": rng.choice(self._prefixes)})
        messages.append({"role": "user", "content": _text(rng, prompt_tokens)})
        body = {"model": mix.model, "messages": messages, "max_tokens": output_tokens, "stream": stream}
        return PreparedRequest(CHAT, json.dumps(body).encode(), stream)


@dataclass(frozen=True)
class Result:
    """What one request saw: status (0 = connection failure), latencies in seconds, chunks received."""

    status: int
    latency_s: float
    ttft_s: float | None
    chunks: int
    retry_after: str | None = None


async def send(session: aiohttp.ClientSession, base_url: str, request: PreparedRequest) -> Result:
    """Send one request and read the whole answer, timing the first chunk."""
    started = time.perf_counter()
    ttft: float | None = None
    chunks = 0
    try:
        async with session.post(
            base_url + request.path, data=request.body, headers={"Content-Type": "application/json"}
        ) as resp:
            if request.stream and resp.status == 200:
                async for _chunk in resp.content.iter_any():
                    if ttft is None:
                        ttft = time.perf_counter() - started
                    chunks += 1
            else:
                await resp.read()
                ttft = time.perf_counter() - started
                chunks = 1
            return Result(
                resp.status, time.perf_counter() - started, ttft, chunks, resp.headers.get("Retry-After")
            )
    except (aiohttp.ClientError, TimeoutError):
        return Result(0, time.perf_counter() - started, None, 0)


def new_session(concurrency: int, timeout_s: float = 600.0) -> aiohttp.ClientSession:
    """A keep-alive connection pool sized for ``concurrency`` requests in flight."""
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=concurrency), timeout=aiohttp.ClientTimeout(total=timeout_s)
    )


async def closed_loop(
    base_url: str, make: Callable[[], PreparedRequest], concurrency: int, total: int
) -> tuple[list[Result], float]:
    """``concurrency`` workers sending back-to-back until ``total`` requests; results and wall seconds."""
    results: list[Result] = []
    remaining = total

    async def worker(session: aiohttp.ClientSession) -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            results.append(await send(session, base_url, make()))

    async with new_session(concurrency) as session:
        started = time.perf_counter()
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
        return results, time.perf_counter() - started


# One arrival: seconds from the start, and its prompt and output tokens (None: drawn by the builder).
Arrival = tuple[float, int | None, int | None]


def poisson_arrivals(rate: Callable[[float], float], seed: int = 0) -> Iterator[Arrival]:
    """Poisson arrivals at ``rate(elapsed_s)``; the rate is re-read at each arrival (gaps are far
    shorter than a simulated hour, so this piecewise-constant rate tracks the daily shape)."""
    rng = random.Random(seed + 2)
    t = 0.0
    while True:
        t += rng.expovariate(max(rate(t), 1e-3))
        yield t, None, None


async def open_loop(
    targets: Sequence[str],
    builder: RequestBuilder,
    arrivals: Iterable[Arrival],
    *,
    concurrency_cap: int,
    duration_s: float,
    max_requests: int,
) -> Counter[str]:
    """Send each arrival at its time, round-robin over ``targets``; arrivals beyond the cap are
    counted as ``skipped`` rather than queued client-side (the gateway's queue is what we observe)."""
    outcome: Counter[str] = Counter()
    inflight: set[asyncio.Task[None]] = set()

    async def one(session: aiohttp.ClientSession, target: str, request: PreparedRequest) -> None:
        result = await send(session, target, request)
        outcome[str(result.status)] += 1

    async with new_session(concurrency_cap) as session:
        started = time.monotonic()
        sent = 0
        for at, prompt, output in arrivals:
            if sent >= max_requests or at >= duration_s:
                break
            await asyncio.sleep(max(0.0, at - (time.monotonic() - started)))
            sent += 1
            if len(inflight) >= concurrency_cap:
                outcome["skipped"] += 1
                continue
            request = builder.build(prompt_tokens=prompt, output_tokens=output)
            task = asyncio.create_task(one(session, targets[sent % len(targets)], request))
            inflight.add(task)
            task.add_done_callback(inflight.discard)
        if inflight:
            await asyncio.wait(inflight)
    return outcome


def trace_arrivals(args: argparse.Namespace, nodes: int) -> Iterator[Arrival]:
    """The trace of ``--trace`` scaled to ``nodes`` simulated engines (their capacity as the ``sim``
    section configures them) and shaped by the compressed day."""
    from oximeter.config import load_section
    from simulator.arrivals import MAX_PROMPT_TOKENS
    from simulator.settings import SimSettings
    from simulator.trace import Capacity, capacity_rps, clock_level, load_trace, schedule

    trace = load_trace(args.trace)
    sim = load_section("sim", SimSettings, args.config)
    cap = Capacity.of(sim, max_concurrency=sim.max_num_seqs)
    max_output = RequestMix().max_output_tokens
    peak = args.trace_peak_utilisation * capacity_rps(trace, cap, MAX_PROMPT_TOKENS, max_output) * nodes
    level = clock_level(args.day_seconds, start_hour=args.start_hour)
    at, prompt, output = schedule(trace, peak, 0.0, args.duration, level, args.seed)
    for t, p, o in zip(at.tolist(), prompt.tolist(), output.tolist(), strict=True):
        yield t, min(p, MAX_PROMPT_TOKENS), max(1, min(o, max_output))


def check_loopback(url: str) -> str:
    """``url`` without a trailing slash; raises ValueError unless it points at this machine."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or parts.hostname not in LOOPBACK:
        raise ValueError(f"target {url!r} is not an http(s) URL on 127.0.0.1/localhost")
    return url.rstrip("/")


async def discover_model(base_url: str) -> str:
    """The first model the target lists, or ``default``."""
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session,
            session.get(f"{base_url}/v1/models") as resp,
        ):
            data = await resp.json()
        return str(data["data"][0]["id"])
    except (aiohttp.ClientError, TimeoutError, ValueError, KeyError, IndexError, TypeError):
        return "default"


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the traffic generator's flags."""
    parser.add_argument(
        "--target",
        action="append",
        required=True,
        help="base URL of a gateway or engine on this machine (repeatable; round-robin)",
    )
    parser.add_argument(
        "--base-rps", type=float, default=4.0, help="daily mean requests per second, all targets"
    )
    parser.add_argument("--concurrency-cap", type=int, default=64, help="most requests in flight at once")
    parser.add_argument("--day-seconds", type=float, default=600.0, help="one simulated day lasts this long")
    parser.add_argument("--start-hour", type=float, default=9.0, help="simulated hour at start (0-24)")
    parser.add_argument(
        "--daily-shape", action=argparse.BooleanOptionalAction, default=True,
        help="follow the daily shape around --base-rps (--no-daily-shape: a constant --base-rps, for runs "
        "that must not depend on the hour they start at)",
    )
    parser.add_argument("--duration", type=float, default=3600.0, help="stop after this many seconds")
    parser.add_argument("--max-requests", type=int, default=1_000_000, help="stop after this many requests")
    parser.add_argument("--stream-ratio", type=float, default=0.7, help="share of streaming requests")
    parser.add_argument("--prompt-scale", type=float, default=1.0,
                        help="prompt lengths (and the shared system prompts) times this: 1 is a chat mix "
                             "for GPU engines; an engine on CPUs answers within a time-to-first-token "
                             "objective only with shorter prompts")
    parser.add_argument("--model", default=None, help="model field (default: the first target's /v1/models)")
    parser.add_argument("--seed", type=int, default=0, help="random seed")
    parser.add_argument("--trace", metavar="FILE", default=None,
                        help="replay this arrival trace (CSV: timestamp, prompt and output tokens) "
                             "instead of Poisson arrivals at --base-rps")
    parser.add_argument("--trace-peak-utilisation", type=float, default=0.6, metavar="U",
                        help="with --trace: load in the trace's busiest minute, at the busiest hour, as "
                             "a share of the targets' capacity as the simulator models it (default 0.6)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Entry point of ``oximeter traffic``: prints one JSON summary line (answers by status) at the end."""
    try:
        targets = [check_loopback(t) for t in args.target]
    except ValueError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    if min(args.base_rps, args.day_seconds, args.trace_peak_utilisation) <= 0 or args.concurrency_cap < 1:
        print("--base-rps, --day-seconds and --trace-peak-utilisation must be > 0, --concurrency-cap >= 1",
              file=sys.stderr)
        return 2
    try:
        if args.trace is None:
            arrivals = poisson_arrivals(lambda t: daily_rate(
                t, args.day_seconds, args.base_rps, args.start_hour, shaped=args.daily_shape), args.seed)
        else:  # read whole, so a bad trace or config is reported before any request
            arrivals = iter(list(trace_arrivals(args, len(targets))))
    except ConfigError as exc:
        print(f"oximeter traffic: {exc}", file=sys.stderr)
        return 2

    async def main() -> Counter[str]:
        model = args.model or await discover_model(targets[0])
        builder = RequestBuilder(scaled_mix(RequestMix(model=model, stream_ratio=args.stream_ratio),
                                            args.prompt_scale), seed=args.seed)
        return await open_loop(
            targets,
            builder,
            arrivals,
            concurrency_cap=args.concurrency_cap,
            duration_s=args.duration,
            max_requests=args.max_requests,
        )

    try:
        outcome = asyncio.run(main())
    except KeyboardInterrupt:
        return 130
    print(json.dumps({"answers": dict(sorted(outcome.items()))}))
    return 0
