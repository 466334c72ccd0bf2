"""Real faults on the real engine (overload, a small KV pool, a hung and a crashed engine core),
judged by the analyzer: each opens an incident with the right layer, rule and node, in both
telemetry modes.

Two stacks watch the session's engine as node ``n1``: Oximeter's telemetry (its gateway in front,
Prometheus scraping the gateway and vLLM's ``/metrics``, an analyzer on ``inputs: oximeter``) and
a stock fleet's (Prometheus scraping vLLM's ``/metrics`` alone through the adapter rules, an
analyzer on ``inputs: stock``). Rules and persistence are scaled as in the other live tests
(``tests/shared_stack.py``), and every wait is a deadline the configuration gives.

Each test has stacks of its own (Prometheus and the analyzers start afresh; the engine is the
session's): an incident an earlier fault opened would still be open (a fast error-budget burn holds
one for its scaled hour), and an open incident keeps its root cause against a later one of the same
strength, so a fault after another would be judged by what came before it. The load is a number of
requests kept in flight, not a rate, so it overloads a fast machine as surely as a slow one.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from shared_stack import ANALYZER_STEP_S, SCALE, live_options, open_deadline_s, resolve_deadline_s
from vllm_load import LONG_TOKENS, SEE_S, SHORT_TOKENS, SPEC, completion, samples, sustained

from analyzer.signals.catalogue import CATALOGUE
from reporter.sink import ChatSink
from stack.demo_stack import IncidentWatch, analyzer_addon
from stack.local import Stack
from stack.procs import http_ok, wait_until
from stack.vllm.engine import VllmEngine

NODE = "n1"
MODES = ("oximeter", "stock")
# The gateway lets queued requests wait as long as the overload lasts: one it turned away (429) or
# timed out (504) would be an ingress fault beside the queue.
QUEUE_PATIENCE_S = 600.0
# Requests kept in flight beyond a queue threshold, so that the queue stays above it while the
# engine's batch turns over.
MARGIN = 4
# An engine up but not serving, from vLLM's own series and from the gateway's.
STALLED = ("engine_stalled", "upstream_stalled")
# Every signal a test here waits for.
SIGNALS = ("queue_length", "preemption_rate", "kv_cache_usage", *STALLED, "target_down")

# The engine's start (the first test here may be the session's first) and its restart, then waits.
pytestmark = pytest.mark.timeout(int(2 * SPEC.start_timeout_s + open_deadline_s(*SIGNALS)
                                     + resolve_deadline_s(0.0, *SIGNALS)))


@pytest.fixture
def judges(vllm_engine: VllmEngine, tmp_path: Path) -> Iterator[dict[str, Stack]]:
    """The two stacks on the session's engine, by telemetry mode; no traffic but the test's own."""
    root = tmp_path
    token_file = root / "relay.token"
    token_file.write_text("real-vllm-relay-token", encoding="utf-8")
    with ChatSink() as sink, contextlib.ExitStack() as stacks:
        started = {}
        for mode in MODES:
            addon = analyzer_addon(root / mode, sink.url, token_file, scale=SCALE, step_s=ANALYZER_STEP_S,
                                   interval_s=ANALYZER_STEP_S, inputs=mode)
            options = live_options(nodes=1, backfill=None, alertmanager=False, redis=False, telemetry=mode,
                                   engine_urls={NODE: vllm_engine.url}, traffic_rps_per_node=0.0,
                                   max_queue_wait_s=QUEUE_PATIENCE_S, addons=(addon,))
            started[mode] = stacks.enter_context(Stack(root / mode, options))
        yield started


def _api(stack: Stack) -> str:
    assert stack.endpoints is not None
    return stack.endpoints.addons["analyzer"]


def _detail(stack: Stack, incident_id: str) -> dict[str, Any]:
    reply = requests.get(f"{_api(stack)}/api/incidents/{incident_id}", timeout=10)
    reply.raise_for_status()
    found: dict[str, Any] = reply.json()
    return found


def _incidents(stack: Stack) -> list[dict[str, Any]]:
    watch = IncidentWatch(_api(stack))
    watch.poll()
    return list(watch.seen.values())


Verdict = tuple[str, str]  # an incident's layer and diagnosis rule


def _judged(judges: dict[str, Stack], verdict: Verdict, deadline_s: float) -> dict[str, dict[str, Any]]:
    """Each analyzer's incident on NODE diagnosed as ``verdict``, waited for within ``deadline_s``
    (an incident may open on a coarser diagnosis, such as a fast error-budget burn, and be diagnosed
    as the evidence persists). A miss fails with every incident each analyzer has."""
    seen: dict[str, list[dict[str, Any]]] = {}

    def diagnosed() -> bool:
        for mode, stack in judges.items():
            seen[mode] = _incidents(stack)
        return all(_on_node(seen[mode], verdict) for mode in judges)
    try:
        wait_until(diagnosed, deadline_s, interval_s=1.0,
                   what=f"a {' '.join(verdict)} incident on {NODE} from each analyzer")
    except TimeoutError as exc:
        pytest.fail(f"{exc}; incidents: " + repr({
            mode: [(i["state"], i["layer"], i["diagnosis"]["rule"], i["root_cause"]) for i in found]
            for mode, found in seen.items()}))
    return {mode: _on_node(found, verdict)[0] for mode, found in seen.items()}


def _on_node(incidents: list[dict[str, Any]], verdict: Verdict) -> list[dict[str, Any]]:
    return [i for i in incidents if (i["layer"], i["diagnosis"]["rule"]) == verdict
            and i["root_cause"]["labels"].get("node") == NODE]


def test_an_overloaded_engine_is_capacity_exhausted(judges: dict[str, Stack],
                                                    vllm_engine: VllmEngine) -> None:
    """More requests than the engine batches, kept in flight through the gateway (beyond its
    concurrency limit, so its queue holds more than the queue-length threshold) and straight to the
    engine (a stock fleet's clients; the engine's own waiting queue then holds more than it too):
    both analyzers name a full engine's queue on n1, ``capacity_exhausted`` in the scheduling layer.
    Short answers fit one KV block each, so the pool never preempts (which would be KV pressure)."""
    verdict = ("scheduling", "capacity_exhausted")
    queue = int(CATALOGUE["queue_length"].threshold or 0) + MARGIN
    gateway = judges["oximeter"].endpoints.gateways[NODE]  # type: ignore[union-attr]
    preempted = samples(vllm_engine)["vllm:num_preemptions_total"]
    with sustained(gateway, SPEC.served_model_name, judges["oximeter"].options.max_concurrency + queue,
                   SHORT_TOKENS), \
            sustained(vllm_engine.url, SPEC.served_model_name, queue, SHORT_TOKENS):
        _judged(judges, verdict, open_deadline_s("queue_length"))
    assert samples(vllm_engine)["vllm:num_preemptions_total"] == preempted


def test_a_small_kv_pool_is_kv_pressure(judges: dict[str, Stack], vllm_engine: VllmEngine) -> None:
    """A full batch of long answers kept in flight through the gateway (within its concurrency
    limit: no queue there) outgrows the engine's 16-block pool, and the engine preempts: both
    analyzers name ``kv_pressure`` in the engine layer on n1."""
    verdict = ("engine", "kv_pressure")
    gateway = judges["oximeter"].endpoints.gateways[NODE]  # type: ignore[union-attr]
    with sustained(gateway, SPEC.served_model_name, SPEC.max_num_seqs, LONG_TOKENS):
        _judged(judges, verdict, open_deadline_s("preemption_rate", "kv_cache_usage"))


def test_a_hung_engine_is_engine_hung(judges: dict[str, Stack], vllm_engine: VllmEngine) -> None:
    """SIGSTOP on the engine core while a full batch runs through the gateway: its API server still
    answers /health, but no token comes. Both analyzers name the engine up but not serving on n1
    (``engine_hung``, engine layer): from vLLM's own series (requests running, no token generated)
    and, with the gateway, from its requests in flight with nothing coming back. SIGCONT and the
    engine serves again."""
    verdict = ("engine", "engine_hung")
    gateway = judges["oximeter"].endpoints.gateways[NODE]  # type: ignore[union-attr]
    start = samples(vllm_engine)["vllm:generation_tokens_total"]
    with sustained(gateway, SPEC.served_model_name, SPEC.max_num_seqs):
        wait_until(lambda: (now := samples(vllm_engine))["vllm:num_requests_running"] >= 1
                   and now["vllm:generation_tokens_total"] > start, SEE_S, interval_s=0.1,
                   what="requests running and generating")
        vllm_engine.signal_engine_core(signal.SIGSTOP)
        try:
            assert http_ok(f"{vllm_engine.url}/health"), "the API server stopped answering /health"
            _judged(judges, verdict, open_deadline_s(*STALLED))
        finally:
            vllm_engine.signal_engine_core(signal.SIGCONT)
    assert completion(vllm_engine.url, SPEC.served_model_name, max_tokens=8) == 200


def test_a_crashed_engine_restarts_under_one_incident(judges: dict[str, Stack],
                                                       vllm_engine: VllmEngine) -> None:
    """SIGKILL on the engine core: the API server stops serving and exits, instead of answering
    /health for an engine that is gone. It exits with status 0 (vLLM 0.32.0 logs EngineDeadError
    and shuts uvicorn down cleanly): a supervisor that restarts only failed processes (systemd's
    Restart=on-failure) leaves it down; Kubernetes' restartPolicy Always restarts it. Restarted on
    its port, it serves again. Each analyzer names the engine's scrape target on n1 down
    (``telemetry_lost``, platform layer) in one incident that resolves once the engine is back; the
    restart opens no second one."""
    verdict = ("platform", "telemetry_lost")
    assert http_ok(f"{vllm_engine.url}/health")
    vllm_engine.signal_engine_core(signal.SIGKILL)
    try:
        wait_until(lambda: not vllm_engine.running, SEE_S, interval_s=0.2, what="the API server exiting")
    except TimeoutError as exc:
        pytest.fail(f"{exc}\n{vllm_engine.log_tail()}")
    assert not http_ok(f"{vllm_engine.url}/health")
    assert vllm_engine.proc.proc is not None and vllm_engine.proc.proc.returncode == 0
    assert "EngineDeadError" in vllm_engine.log_tail(200)
    found = _judged(judges, verdict, open_deadline_s("target_down"))
    vllm_engine.restart()
    assert completion(vllm_engine.url, SPEC.served_model_name, max_tokens=8) == 200

    def down_cleared() -> bool:
        return all(e["cleared_at"] is not None for mode, stack in judges.items()
                   for e in _detail(stack, found[mode]["id"])["evidence"] if e["signal"] == "target_down")
    wait_until(down_cleared, resolve_deadline_s(0.0, "target_down"), interval_s=1.0,
               what="the engine's target back up in each analyzer's incident")
    opened = {mode: [i["id"] for i in _incidents(stack)] for mode, stack in judges.items()}
    assert opened == {mode: [i["id"]] for mode, i in found.items()}
