"""One scenario run live (HTTP, real clock) and as history (virtual clock) agrees.

Both runs see the very same requests. The live run fires a flat-traffic schedule drawn from
``simulator/arrivals.py`` against ``oximeter sim serve`` and records when each request actually
went out; the history then replays exactly those requests, at those offsets, through the same
models on a virtual clock. On a starved machine the live requests leave late, and the history sees
the same late arrivals, so what is compared is the model behind HTTP on a real clock (one token
per iteration, asyncio wake-ups, client latency) against the history's virtual clock (eight tokens
per iteration), never two different arrival streams. A thermal throttle on n1's GPU 0 must slow
n1 against n2 in both runs.
"""

from __future__ import annotations

import asyncio
import json
import math
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pandas as pd
from prometheus_client.parser import text_string_to_metric_families

from simulator.arrivals import Arrival, constant_rate_schedule
from simulator.history import generate
from simulator.load_shape import RequestMix
from simulator.scenario import Scenario, load_scenario
from simulator.traffic import PreparedRequest, Result, new_session, send
from tests.simulator.sim_harness import MODEL, Sim, StartSim

RATE_RPS = 2.5  # per node: n1 (throttled) runs ~8 of its 16 sequences and never queues, n2 ~4
DURATION_S = 40
SAMPLE_S = 1  # history step = live sampling interval
THROTTLE = 0.6  # SM clock fraction of n1's GPU 0: n1 decodes 1/0.6 ≈ 1.7× slower
SCENARIO = f"""
name: live-history-agreement
nodes: 2
gpus_per_node: 4
model: {MODEL}
seed: 3
base_rps: {RATE_RPS}
daily_shape: false
# The live fleet has no dependency step by default; the same fleet on both sides.
engine: {{dependency_latency_s: 0}}
# The live run hits the engines directly (their own max_num_seqs is the only queue); a gateway
# limit above any batch reached keeps the history's gateway from queueing what live never queues.
gateway: {{max_concurrency: 64}}
faults:
  - {{kind: thermal_throttle, node: n1, gpu: 0, start: 0, strength: {THROTTLE}}}
truth: {{layer: infrastructure, entity: {{node: n1, gpu: "0"}}, rule: thermal_throttle}}
"""
TTFT = "vllm:time_to_first_token_seconds"
ITL = "vllm:inter_token_latency_seconds"
TOKENS = "vllm:generation_tokens_total"
RUNNING = "vllm:num_requests_running"


@dataclass(frozen=True)
class Observed:
    """One node in one run: counter increases over the run, gauges sampled once per second."""

    counters: Mapping[tuple[str, str], float]  # (sample name, le or "") -> increase
    seconds: float  # from the first request's due time to the last sample
    running: tuple[float, ...]
    util: Mapping[int, tuple[float, ...]]  # GPU index -> samples
    temperature: Mapping[int, tuple[float, ...]]


def quantile(q: float, obs: Observed, family: str) -> float:
    """PromQL's histogram_quantile over the run's bucket increases (linear inside a bucket)."""
    buckets = sorted(
        (float(le), count) for (name, le), count in obs.counters.items() if name == f"{family}_bucket"
    )
    rank = q * buckets[-1][1]
    lower, below = 0.0, 0.0
    for le, count in buckets:
        if count >= rank:
            if math.isinf(le):
                return lower
            return lower + (le - lower) * (rank - below) / max(count - below, 1e-12)
        lower, below = le, count
    raise AssertionError(f"{family}: no bucket holds rank {rank}")


def mean(obs: Observed, family: str) -> float:
    """Sum over count of a histogram's increase."""
    return obs.counters[(f"{family}_sum", "")] / obs.counters[(f"{family}_count", "")]


@dataclass(frozen=True)
class Check:
    """One signal, how to read it, and how far live and history may drift apart (and why)."""

    signal: str
    read: Callable[[Observed], float]
    rel: float
    abs: float
    why: str


def _gpu_checks(gpu: int) -> list[Check]:
    return [
        Check(
            f"gpu{gpu} utilisation mean",
            lambda o: statistics.fmean(o.util[gpu]),
            0.15,
            0.02,
            "each live sample is the last 0.5 s tick's busy time, history's the whole 1 s step: the "
            "same busy share on average, but a lightly loaded GPU's 0.5 s ticks spread widely, so "
            "their median moved with the run (once 16 % under history's with a CPU hog beside the "
            "test) while the mean is the busy time itself",
        ),
        Check(
            f"gpu{gpu} temperature median (°C)",
            lambda o: statistics.median(o.temperature[gpu]),
            0.0,
            1.5,
            "±0.4 °C reading noise; the live GPUs idle between the simulator's start and the first "
            "request, cooling from 35 °C toward the 32 °C ambient (measured 0.35 °C lower; a 15 s "
            "start on a loaded machine leaves ~0.7 °C at the run's median)",
        ),
    ]


CHECKS = [
    Check(
        "engine TTFT median (s)",
        lambda o: quantile(0.5, o, TTFT),
        0.12,
        0.0,
        "history times a first token inside a coarse iteration; measured history 0-5 % higher, "
        "varying by ~3 % from run to run with where live arrivals fall in an iteration",
    ),
    Check(
        "engine TTFT mean (s)",
        lambda o: mean(o, TTFT),
        0.12,
        0.0,
        "measured history 0-4 % higher (README: −5 % at k=8 on other arrivals); within 3 % with "
        "two CPU hogs beside the test",
    ),
    Check(
        "inter-token latency median (s)",
        lambda o: quantile(0.5, o, ITL),
        0.06,
        0.0,
        "history spreads each 8-token iteration evenly over its tokens; measured history 0-2.5 % "
        "higher, the same in every run (the live engine's timeline does not depend on wake-ups)",
    ),
    Check(
        "inter-token latency mean (s)",
        lambda o: mean(o, ITL),
        0.06,
        0.0,
        "measured history +4 % (n1) and +3.7 % (n2) in every run, as the README's ITL +4 % at k=8",
    ),
    Check(
        "generation tokens per second",
        lambda o: o.counters[(TOKENS, "")] / o.seconds,
        0.03,
        0.0,
        "same requests; only tokens still in flight at the end differ (up to 8 per running sequence)",
    ),
    Check(
        "requests running median",
        lambda o: statistics.median(o.running),
        0.15,
        1.0,
        "coarse iterations end a request at its last iteration's end (e2e +3.5 %); ±1 sequence "
        "for a sample landing either side of a finish (measured 8/8 and 3.5/4)",
    ),
    *[c for gpu in range(4) for c in _gpu_checks(gpu)],
]


# -- history ------------------------------------------------------------------------------
def history_observed(sc: Scenario, out: Path, sent: Mapping[str, list[Arrival]]) -> dict[str, Observed]:
    """The history of exactly the requests the live run sent, read back from its Parquet output."""
    store, _fleet = generate(sc, DURATION_S / 86400, SAMPLE_S, math.floor(time.time()), recorded=sent)
    out.mkdir(parents=True)
    store.write_parquet(out)
    series = pd.read_parquet(out / "series.parquet")
    frame = pd.read_parquet(out / "samples.parquet").merge(series, on="series_id").sort_values("timestamp")
    assert frame.timestamp.nunique() == DURATION_S // SAMPLE_S
    last = frame[frame.timestamp == frame.timestamp.max()]
    observed = {}
    for node in ("n1", "n2"):
        engine = last[(last.node == node) & (last.family.str.startswith("vllm:"))]
        counters = {
            (row.name, json.loads(row.labels).get("le", "")): row.value
            for row in engine.itertuples(index=False)
        }

        def gauge(name: str, node: str = node) -> pd.DataFrame:
            return frame[(frame.name == name) & (frame.node == node)]

        # Every request replayed has finished (200) or is in flight at the gateway, and no other
        # request exists.
        mine = last[last.node == node]
        ok = mine[(mine.name == "oximeter_requests_total") & mine.labels.str.contains('"code": "200"')]
        inflight = mine[mine.name == "oximeter_inflight_requests"]
        assert ok.value.sum() + inflight.value.sum() == len(sent[node]), node

        observed[node] = Observed(
            counters,
            DURATION_S,
            tuple(gauge(RUNNING).value),
            {int(g): tuple(s.value) for g, s in gauge("oximeter_gpu_utilization_ratio").groupby("gpu")},
            {int(g): tuple(s.value) for g, s in gauge("oximeter_gpu_temperature_celsius").groupby("gpu")},
        )
    return observed


# -- live ---------------------------------------------------------------------------------
def serve_flags(sc: Scenario) -> list[str]:
    """``sim serve`` flags for the scenario's fleet and engine (live always runs 1 token/iteration)."""
    e = sc.engine
    flags = {
        "--gpus-per-node": sc.gpus_per_node,
        "--model": sc.model,
        "--seed": sc.seed,
        "--max-num-seqs": e.max_num_seqs,
        "--prefill-s-per-token": e.prefill_s_per_token,
        "--decode-s-per-token": e.decode_s_per_token,
        "--decode-batch-factor": e.decode_batch_factor,
        "--kv-blocks": e.kv_blocks,
        "--block-tokens": e.block_tokens,
        "--prefix-hit-rate": e.prefix_hit_rate,
        "--dependency-latency-s": e.dependency_latency_s,
    }
    return [part for flag, value in flags.items() for part in (flag, str(value))]


# Raw ``/metrics`` text and ``/fleet/gpus`` answer per node. The text is parsed after the run: the
# replay's event loop only sends requests and fetches (parsing every second, on a loaded machine,
# delayed the requests due meanwhile by up to a second).
RawSnapshot = dict[str, tuple[str, dict[str, Any]]]
Snapshot = dict[str, tuple[dict[tuple[str, str], float], dict[str, Any]]]


async def _snapshot(session: aiohttp.ClientSession, sim: Sim) -> RawSnapshot:
    async def one(i: int) -> tuple[str, tuple[str, dict[str, Any]]]:
        async with session.get(f"{sim.url(i)}/metrics") as resp:
            text = await resp.text()
        async with session.get(f"{sim.url(i)}/fleet/gpus", params={"node": f"n{i}"}) as resp:
            gpus = await resp.json()
        return f"n{i}", (text, gpus)

    return dict(await asyncio.gather(*(one(i) for i in range(1, sim.nodes + 1))))


def parsed(raw: RawSnapshot) -> Snapshot:
    """A snapshot's metric samples keyed by (sample name, le)."""
    return {
        node: (
            {
                (s.name, s.labels.get("le", "")): s.value
                for fam in text_string_to_metric_families(text)
                for s in fam.samples
            },
            gpus,
        )
        for node, (text, gpus) in raw.items()
    }


@dataclass
class LiveRun:
    """What the live run saw: snapshots, results, and each node's requests as actually sent."""

    start: Snapshot
    samples: list[Snapshot]
    results: list[Result]
    sent: dict[str, list[Arrival]]  # offsets from the first request's due time, as sent
    seconds: float  # from that due time to the last snapshot
    lateness: list[float]  # how late each request left (reported, not judged: the history saw it)


async def live_run(sim: Sim, schedules: Mapping[str, list[Arrival]]) -> LiveRun:
    """Fire the schedules at their offsets, noting when each request really left; snapshot before
    and once per second; cancel what still runs at the end."""
    loop = asyncio.get_running_loop()
    sent: dict[str, list[Arrival]] = {node: [] for node in schedules}
    lateness: list[float] = []
    async with new_session(512, timeout_s=120) as session:
        start = await _snapshot(session, sim)
        t0 = loop.time() + 0.5  # every request task is scheduled before the first is due

        async def fire(node: str, a: Arrival) -> Result:
            await asyncio.sleep(t0 + a.at_s - loop.time())
            at = loop.time() - t0
            sent[node].append(Arrival(at, a.prompt_tokens, a.output_tokens))
            lateness.append(at - a.at_s)
            # Token ids, not text: the engine counts exactly this many prompt tokens.
            body = {"model": MODEL, "prompt": [7] * a.prompt_tokens, "max_tokens": a.output_tokens}
            return await send(
                session, sim.url(int(node[1:])),
                PreparedRequest("/v1/completions", json.dumps(body).encode(), False),
            )  # fmt: skip

        tasks = [asyncio.create_task(fire(node, a)) for node, arrivals in schedules.items() for a in arrivals]
        raw: list[RawSnapshot] = []
        seconds = 0.0
        for j in range(1, DURATION_S // SAMPLE_S + 1):
            await asyncio.sleep(t0 + j * SAMPLE_S - loop.time())
            seconds = loop.time() - t0
            raw.append(await _snapshot(session, sim))
        for task in tasks:
            task.cancel()  # requests still running at the end are not part of the comparison
        done = await asyncio.gather(*tasks, return_exceptions=True)
    return LiveRun(parsed(start), [parsed(r) for r in raw], [r for r in done if isinstance(r, Result)],
                   sent, seconds, lateness)  # fmt: skip


def live_observed(run: LiveRun) -> dict[str, Observed]:
    """Counter increases from the first to the last snapshot, gauges from every sample."""
    observed = {}
    samples = run.samples
    for node, (first, _gpus) in run.start.items():
        last = samples[-1][node][0]
        engine = {k: v - first.get(k, 0.0) for k, v in last.items() if k[0].startswith("vllm:")}

        def per_gpu(key: str, node: str = node) -> dict[int, tuple[float, ...]]:
            gpus = [s[node][1]["gpus"] for s in samples]
            return {g["index"]: tuple(float(snap[g["index"]][key]) for snap in gpus) for g in gpus[0]}

        observed[node] = Observed(
            engine,
            run.seconds,
            tuple(s[node][0][(RUNNING, "")] for s in samples),
            per_gpu("utilization_ratio"),
            per_gpu("temperature_celsius"),
        )
    return observed


# -- the test -----------------------------------------------------------------------------
def test_live_run_and_history_agree(tmp_path: Path, start_sim: StartSim) -> None:
    path = tmp_path / "scenario.yaml"
    path.write_text(SCENARIO, encoding="utf-8")
    sc = load_scenario(path)
    mix = RequestMix(model=sc.model)
    schedules = {
        node: constant_rate_schedule(sc.seed, node, mix, sc.base_rps, DURATION_S) for node in ("n1", "n2")
    }
    sim = start_sim(*serve_flags(sc), nodes=sc.nodes)
    fault = {"kind": "thermal_throttle", "node": "n1", "gpu": 0, "strength": THROTTLE, "id": "hot"}
    assert sim.admin("POST", "/admin/faults", json=fault).status_code == 201
    run = asyncio.run(live_run(sim, schedules))
    live = live_observed(run)
    # Every request that finished in time succeeded.
    assert run.results and {r.status for r in run.results} == {200}

    # The history replays what was sent inside its horizon: a request a starved test process sent
    # after the run's end would arrive after the history's last sample anyway.
    sent = {node: [a for a in arrivals if a.at_s < DURATION_S] for node, arrivals in run.sent.items()}
    history = history_observed(sc, tmp_path / "history", sent)
    rows, failures = [], []
    for node in ("n1", "n2"):
        for check in CHECKS:
            h, lv = check.read(history[node]), check.read(live[node])
            ok = math.isclose(lv, h, rel_tol=check.rel, abs_tol=check.abs)
            rows.append(f"{node} {check.signal}: live {lv:.4g} history {h:.4g} {'ok' if ok else 'OUT'}")
            if not ok:
                failures.append(f"{rows[-1]} (tolerance rel {check.rel} abs {check.abs}: {check.why})")
    late_p99 = statistics.quantiles(run.lateness, n=100)[98]
    rows.append(f"send lateness p99 {late_p99 * 1000:.1f} ms (the history saw the same), "
                f"{sum(map(len, sent.values()))} requests, last sample at {run.seconds:.2f} s")
    print("\n".join(rows))  # the measured agreement, with pytest -s
    assert not failures, "\n".join([*failures, "", *rows])

    # The throttle's fingerprint points the same way in both runs: n1 hot and slower, its
    # throttled GPU busier than its tensor-parallel peers, n2 untouched.
    for seen in (history, live):
        n1, n2 = seen["n1"], seen["n2"]
        assert quantile(0.5, n1, TTFT) > quantile(0.5, n2, TTFT)
        assert mean(n1, ITL) > 1.4 * mean(n2, ITL)
        assert statistics.median(n1.running) > statistics.median(n2.running)
        assert statistics.median(n1.temperature[0]) > 85 > statistics.median(n2.temperature[0])
        assert statistics.median(n1.util[0]) > statistics.median(n1.util[1])
