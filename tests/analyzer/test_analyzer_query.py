"""Each signal's query is written once (analyzer/signals/query.py): the frame source's replay of every
catalogue signal, traffic guard and diagnosis context agrees with what Prometheus computes from
the same PromQL on a small fixture (checked by ``promtool test rules`` in one run)."""

from __future__ import annotations

import json
import shutil
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from analyzer.service.pipeline import CONTEXT
from analyzer.signals import query as q
from analyzer.signals.catalogue import CATALOGUE, build_catalogue
from analyzer.signals.label_value import LabelValue
from analyzer.signals.raw import RawStore
from analyzer.signals.sources.frames import FrameSource
from analyzer.signals.spec import SignalSpec

PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
STEP = 15
ROWS = 400  # 100 min: an hour's window (the ECC burn) and then some
EVAL = 360  # the row both evaluate at
T0 = datetime(1970, 1, 1, tzinfo=UTC)  # promtool's series start at time 0

Series = tuple[str, dict[str, str], np.ndarray]


def _const(value: float) -> np.ndarray:
    return np.full(ROWS, float(value))


def _counter(per_step: float) -> np.ndarray:
    return np.arange(ROWS) * float(per_step)


def fixture() -> list[Series]:
    """Every metric a catalogue or context query reads, on two nodes (two instances on one)."""
    out: list[Series] = []

    def add(name: str, values: np.ndarray, **labels: str) -> None:
        out.append((name, {"job": "j", "instance": f"{labels.get('node', 'n1')}:9", **labels}, values))

    for node, load in (("n1", 1.0), ("n2", 2.0)):
        gw = {"node": node, "service": "chat"}
        for hist, extra in (("oximeter_queue_wait_seconds", {}), ("oximeter_time_to_first_token_seconds", {}),
                            ("oximeter_request_duration_seconds", {"route": "/v1/chat"}),
                            ("oximeter_dependency_duration_seconds", {"dependency": "db"})):
            # Per step: 6 under 0.1 s, 3 more under 0.5 s, load more under 2.5 s, 1 more above.
            for le, per_step in (("0.1", 6), ("0.5", 9), ("2.5", 9 + load), ("+Inf", 10 + load)):
                add(f"{hist}_bucket", _counter(per_step), le=le, **gw, **extra)
            add(f"{hist}_count", _counter(10 + load), **gw, **extra)
        # Rising: a range's oldest sample is in it for this promtool (2.x) and out of it for the
        # replay and Prometheus 3 (left-open ranges), so ``*_over_time`` inputs must not hinge on it.
        add("oximeter_queue_length", np.arange(ROWS) // 7 + load, **gw)
        add("oximeter_queue_limit", _const(10), **gw)
        # Falling, so that ``min_over_time`` reads the newest sample (see above); a straight line
        # has the same least-squares slope with or without the range's oldest sample.
        add("oximeter_external_queue_length", 5000 - np.arange(ROWS) * load, node=node, queue="jobs")
        add("oximeter_retried_requests_total", _counter(load), route="/v1/chat", **gw)
        for code, per_step in (("200", 20.0), ("429", load), ("504", 0.5)):
            add("oximeter_requests_total", _counter(per_step), code=code, route="/v1/chat", **gw)
        for reason, per_step in (("stop", 9.0), ("length", 1.0)):
            add("oximeter_completions_total", _counter(per_step), finish_reason=reason, **gw)
        add("oximeter_empty_completions_total", _counter(0.25 * load), **gw)
        add("oximeter_target_info", _const(1), model="m", **gw)
        for result, per_step in (("hit", 8.0), ("miss", load)):
            add("oximeter_cache_requests_total", _counter(per_step), cache="redis", result=result, node=node)
        add("oximeter_process_resident_memory_bytes", _const(8 * load * 2**30), node=node, process="vllm")
        add("oximeter_host_memory_total_bytes", _const(100 * 2**30), node=node)
        engine = {"node": node, "model_name": "m", "engine": "0"}
        add("vllm:kv_cache_usage_perc", _const(0.4 * load), **engine)
        # The vLLM adapter's record of each engine's pool: its size is a label.
        add("node_model_engine:vllm_cache_config:info", _const(1), node=node, model="m", engine="0",
            num_gpu_blocks=str(int(1000 * load)), block_size="16")
        add("vllm:num_preemptions_total", _counter(0.1 * load), **engine)
        add("vllm:prefix_cache_hits_total", _counter(3.0), **engine)
        add("vllm:prefix_cache_queries_total", _counter(4.0 * load), **engine)
        add("vllm:num_requests_waiting", np.arange(ROWS) / 10 * load, **engine)
        # n2's engine stalled: requests held while its token counters (vLLM's, the gateway's) stand still.
        add("vllm:num_requests_running", _const(4 * load), **engine)
        add("vllm:generation_tokens_total", _counter(50.0 * (2 - load)), **engine)
        add("oximeter_inflight_requests", _const(3 * load), **gw)
        add("oximeter_output_tokens_total", _counter(40.0 * (2 - load)), **gw)
        add("oximeter_inter_token_seconds_count", _counter(0.0), **gw)  # nothing streamed: answers only
        for hist in ("vllm:inter_token_latency_seconds", "vllm:time_to_first_token_seconds"):
            for le, per_step in (("0.01", 50), ("0.1", 80 + 10 * load), ("+Inf", 100 + 10 * load)):
                add(f"{hist}_bucket", _counter(per_step), le=le, **engine)
            add(f"{hist}_count", _counter(100 + 10 * load), **engine)
        # The Kubernetes adapter's records (a stock fleet's Prometheus evaluates them).
        kube = {"node": node, "namespace": "llm", "pod": f"vllm-{node}"}
        add("node_pod:kube_pod_container_status_restarts:increase5m", _const(load - 1), **kube)
        add("node_pod:kube_pod_container_status_restarts:increase15m", _const(2 * load), **kube)
        add("node_pod:kube_pod_container_oom_kills:increase5m", _const(load - 1), **kube)
        add("node_pod:kube_pod_ready:max", _const(2 - load), **kube)
        add("node:kube_node_ready:max", _const(1), node=node)
        add("up", _const(load - 1), node=node)  # n1's target down, n2's up
        for gpu in ("0", "1"):
            card = {"node": node, "gpu": gpu, "gpu_model": "H100"}
            add("oximeter_gpu_temperature_celsius", _const(60 + 10 * load + int(gpu)), **card)
            add("oximeter_gpu_sm_clock_hertz", _const(1.2e9 + 1e8 * load), **card)
            add("oximeter_gpu_sm_clock_max_hertz", _const(1.98e9), **card)
            add("oximeter_gpu_utilization_ratio", _const(0.3 * load + 0.1 * int(gpu)), **card)
            add("oximeter_gpu_memory_used_bytes", _const(40e9 * load), **card)
            add("oximeter_gpu_memory_total_bytes", _const(80e9), **card)
            add("oximeter_gpu_pcie_replay_total", _counter(0.5 * load), **card)
            add("oximeter_gpu_xid_errors_total", _counter(0.01), xid="79", **card)
            add("oximeter_gpu_xid_errors_total", _counter(0.05), xid="13", **card)  # not a paging code
            for kind, per_step in (("corrected", 2.0 * load), ("uncorrected", 0.01)):
                add("oximeter_gpu_ecc_errors_total", _counter(per_step), kind=kind, **card)
            for kind in ("crc_flit", "replay"):
                add("oximeter_gpu_nvlink_errors_total", _counter(load), kind=kind, link="0", **card)
            for reason, active in (("idle", 1.0), ("hw_thermal", load - 1), ("sw_power", 1.0)):
                add("oximeter_gpu_clock_event_active", _const(active), reason=reason, **card)
            up = _const(1)
            if (node, gpu) == ("n2", "1"):
                up[EVAL - 8:] = np.nan  # its telemetry stopped two minutes ago
            add("oximeter_gpu_up", up, **card)
    # A second scrape of one card (another instance): ``max without (instance, job)`` takes the higher.
    add("oximeter_gpu_temperature_celsius", _const(99), node="n1", gpu="0", gpu_model="H100", instance="x:9")
    return out


def replayable() -> dict[str, SignalSpec]:
    """Every query the analyzer runs: the catalogue's, their traffic guards, the rules' context."""
    specs = {**CATALOGUE, **CONTEXT}
    for spec in CATALOGUE.values():
        guard = spec.traffic_spec()
        if guard is not None:
            specs[guard.name] = guard
    return specs


def _values(series: np.ndarray) -> str:
    return " ".join("_" if np.isnan(v) else repr(float(v)) for v in series)


def _labels(labels: dict[str, str]) -> str:
    return "{" + ", ".join(f"{k}={json.dumps(v)}" for k, v in sorted(labels.items())) + "}"


def test_every_signal_replays_as_prometheus_computes_it(tmp_path: Path) -> None:
    series = fixture()
    index = pd.date_range(T0, periods=ROWS, freq=pd.Timedelta(seconds=STEP))
    store = RawStore(index, [n for n, _, _ in series], [lab for _, lab, _ in series],
                     np.stack([v for _, _, v in series], axis=1).astype(np.float32))
    source = FrameSource(raw=store)
    at = T0 + timedelta(seconds=EVAL * STEP)
    inputs = [{"series": f"{name}{_labels(lab)}", "values": _values(v)} for name, lab, v in series]
    checks = []
    specs = replayable()
    assert [name for name, spec in specs.items() if spec.expr is None] == []  # scrape health too
    for name, spec in specs.items():
        assert spec.expr is not None
        frame = source.fetch(spec, at, at, STEP)
        row = frame.values.iloc[-1].dropna()
        assert len(row), f"{name}: the fixture gives it no value"
        if isinstance(spec.expr, LabelValue):
            # PromQL answers the info series (value 1); the source reads the number from its label.
            pools = {frame.labels_of(str(k))["node"]: v for k, v in row.items()}
            assert pools == {"n1": 1000.0, "n2": 2000.0}
            checks.append({"expr": f"count({spec.promql})", "eval_time": f"{EVAL * STEP}s",
                           "exp_samples": [{"labels": "{}", "value": len(row)}]})
            continue
        for key, value in row.items():
            marked = {**frame.labels_of(str(key)), "signal": name}
            inputs.append({"series": f"frame_value{_labels(marked)}",
                           "values": f"{float(value)!r}x{ROWS - 1}"})
        mine = f'frame_value{{signal="{name}"}}'
        # Relative difference (absolute below 1), rounded: float32 replay against float64 PromQL.
        diff = (f"round((({spec.promql}) - ignoring(signal) {mine}) "
                f"/ ignoring(signal) clamp_min(abs({mine}), 1), 1e-4)")
        zeros = [{"labels": _labels(frame.labels_of(str(k))), "value": 0} for k in row.index]
        checks.append({"expr": diff, "eval_time": f"{EVAL * STEP}s", "exp_samples": zeros})
        checks.append({"expr": f"count({spec.promql})", "eval_time": f"{EVAL * STEP}s",
                       "exp_samples": [{"labels": "{}", "value": len(row)}]})
    test = {"tests": [{"interval": f"{STEP}s", "input_series": inputs, "promql_expr_test": checks}]}
    (tmp_path / "replay.test.yml").write_text(yaml.safe_dump(test, sort_keys=False))
    result = subprocess.run([PROMTOOL, "test", "rules", "replay.test.yml"], cwd=tmp_path, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]


@pytest.mark.parametrize("signal", ["engine_stalled", "upstream_stalled"])
def test_a_stalled_engine_shows_the_requests_it_holds_and_a_serving_one_zero(signal: str) -> None:
    series = fixture()
    index = pd.date_range(T0, periods=ROWS, freq=pd.Timedelta(seconds=STEP))
    store = RawStore(index, [n for n, _, _ in series], [lab for _, lab, _ in series],
                     np.stack([v for _, _, v in series], axis=1).astype(np.float32))
    at = T0 + timedelta(seconds=EVAL * STEP)
    frame = FrameSource(raw=store).fetch(CATALOGUE[signal], at, at, STEP)
    row = frame.values.iloc[-1]
    held = {frame.labels_of(str(k))["node"]: float(v) for k, v in row.items()}
    # n2's counters stand still while it holds 8 (vLLM) or 6 (gateway) requests; n1's move.
    assert held == {"n1": 0.0, "n2": 8.0 if signal == "engine_stalled" else 6.0}


def test_a_query_given_both_ways_must_agree() -> None:
    expr = q.gauge("oximeter_gpu_up")
    assert SignalSpec.of(expr, name="x", layer="platform", kind="gauge").promql == \
        "max without (instance, job) (oximeter_gpu_up)"
    with pytest.raises(ValueError, match="is not its expression"):
        SignalSpec(name="x", layer="platform", kind="gauge", promql="oximeter_gpu_up", expr=expr)


def test_an_override_of_the_query_is_promql_only() -> None:
    # The replay expression no longer describes the configured query: it is dropped, not kept stale.
    mine = build_catalogue({"gpu_temperature": {"promql": "max(my_temperature)"},
                            "gpu_down": {"threshold": 0.2}})
    assert mine["gpu_temperature"].expr is None
    assert mine["gpu_down"].expr == CATALOGUE["gpu_down"].expr


def test_an_override_of_the_query_drops_the_shipped_record() -> None:
    # The shipped recording rule computes the shipped query, not the configured one.
    mine = build_catalogue({"queue_length": {"promql": "max by (service, node) (my_queue)"},
                            "queue_wait_p99": {"threshold": 2.0}})
    assert CATALOGUE["queue_length"].record is not None and mine["queue_length"].record is None
    assert mine["queue_wait_p99"].record == CATALOGUE["queue_wait_p99"].record is not None
    named = build_catalogue({"queue_length": {"promql": "max(my_queue)", "record": "my:queue"}})
    assert named["queue_length"].record == "my:queue"


@pytest.mark.parametrize(("seconds", "text"),
                         [(60, "1m"), (300, "5m"), (3600, "1h"), (90, "90s"), (5400, "90m")])
def test_ranges_render_as_promql(seconds: int, text: str) -> None:
    assert q.duration(seconds) == text
