"""Guards against false alarms at their cause: a p99 burst that only its own window holds, an idle
GPU's clock drop, and context-only symptoms (ARCHITECTURE "Thresholds", "Gateway signals")."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from analyzer_frames import at, frame

from analyzer.detection.detectors import BaselineRatio
from analyzer.detection.evaluate import evaluate_signal, widen_ratio
from analyzer.detection.judges import detectors_of
from analyzer.signals.catalogue import CATALOGUE
from analyzer.signals.frame import Baseline, SeriesFrame
from analyzer.signals.shared_queries import P99_MIN_COUNT, PEER_MIN_COUNT
from analyzer.signals.spec import LATENCY_NOISE_Z

ROWS = 40


def _burst(start: int, rows: int, high: float, low: float) -> np.ndarray:
    out = np.full(ROWS, low, dtype=np.float32)
    out[start:start + rows] = high
    return out


# A 5-min p99 holds one burst for 5 samples (+1 for the edge); only a rise that outlasts its own
# window by the seed's 5 minutes opens an event: 8 of 10 one-minute samples (k-of-n, 75 %).
P99_CASES = [
    ("ttft_p99", 0.15, 0.45, 6, None),
    ("ttft_p99", 0.15, 0.45, 20, 17),
    ("engine_ttft_p99", 0.10, 0.30, 6, None),
    ("engine_ttft_p99", 0.10, 0.30, 20, 17),
    ("queue_wait_p99", 0.005, 0.6, 6, None),
    ("queue_wait_p99", 0.005, 0.6, 20, 17),
]


@pytest.mark.parametrize(("signal", "baseline", "high", "rows", "detected_row"), P99_CASES)
def test_a_p99_burst_inside_its_own_window_does_not_fire(signal: str, baseline: float, high: float, rows: int,
                                                          detected_row: int | None) -> None:
    values = frame({"s": _burst(10, rows, high, baseline)})
    history = {86400.0: frame({"s": np.full(ROWS + 60, baseline)}).set_axis(
        pd.date_range(at(-30) - pd.Timedelta(days=1), periods=ROWS + 60, freq="60s"), axis=0)}
    # Plenty of traffic: the guard is not what keeps these quiet.
    traffic = frame({"s": np.full(ROWS, 100.0)})
    events = evaluate_signal(CATALOGUE[signal], SeriesFrame(values), history=history, traffic=traffic,
                             step_s=60.0)
    assert [e.detected_at for e in events] == ([] if detected_row is None else [at(detected_row)])


@pytest.mark.parametrize(("reason_active", "expected"), [(0.0, []), (1.0, [at(12)])])
def test_sm_clock_drop_counts_only_with_a_non_idle_reason(reason_active: float, expected: list) -> None:
    clock = frame({"g": _burst(10, 20, 0.5, 1.0)})
    # The guard's series: 1 while a clock-event reason other than idle is active.
    guard = frame({"g": _burst(10, 20, reason_active, 0.0)})
    events = evaluate_signal(CATALOGUE["gpu_sm_clock_ratio"], SeriesFrame(clock), traffic=guard, step_s=60.0)
    assert [e.detected_at for e in events] == expected


def test_symptoms_seen_twice_are_context_only() -> None:
    # End-to-end latency (output length) and the engine's own TTFT (the gateway's is the SLO one).
    # And a busy GPU: load, read as context by the capacity rule.
    assert {name for name, spec in CATALOGUE.items() if not spec.opens_incident} == {
        "request_p99", "engine_ttft_p99", "gpu_utilization_p95"}


@pytest.mark.parametrize(("n2_gpu2", "others", "flagged"), [
    (0.37, 0.20, True),  # the slow GPU is busy while its tensor-parallel peers wait
    (0.01, 0.00, False),  # an idle fleet: 1 point is no outlier (absolute margin 0.1)
    (0.20, 0.20, False),
])
def test_gpu_utilization_peer(n2_gpu2: float, others: float, flagged: bool) -> None:
    cols = {f"g{i}": np.full(ROWS, others, dtype=np.float32) for i in range(7)}
    cols["slow"] = np.full(ROWS, n2_gpu2, dtype=np.float32)
    labels = {c: {"node": "n2" if c in ("g4", "g5", "g6", "slow") else "n1", "gpu": c, "gpu_model": "H100"}
              for c in cols}
    events = evaluate_signal(CATALOGUE["gpu_utilization_peer"], SeriesFrame(frame(cols), labels), step_s=60.0)
    assert [(e.entity["gpu"], e.detected_at) for e in events] == ([("slow", at(3))] if flagged else [])


@pytest.mark.parametrize(("value", "noise_z", "flagged"), [
    (1.9, 0.0, True),  # 1.9 × baseline, but inside a p99 that swings by 0.4 s (σ) on its own
    (1.9, 3.0, False),
    (2.5, 3.0, True),  # 1.5 s over the baseline: beyond 3 σ of its own spread
])
def test_baseline_ratio_judges_a_swinging_statistic_against_its_spread(value: float, noise_z: float,
                                                                       flagged: bool) -> None:
    values = frame({"s": np.full(3, value)})
    baseline = Baseline(center=frame({"s": np.full(3, 1.0)}), scale=frame({"s": np.full(3, 0.4)}))
    detection = BaselineRatio(1.5, "up", 0.1, noise_z=noise_z).detect(values, baseline)
    assert detection.flags["s"].tolist() == [flagged] * 3


def test_latency_signals_use_the_noise_margin() -> None:
    ratios = {name: [d for d in detectors_of(spec) if isinstance(d, BaselineRatio)]
              for name, spec in CATALOGUE.items()}
    assert {name for name, ds in ratios.items() if ds and ds[0].noise_z == LATENCY_NOISE_Z} == {
        name for name, spec in CATALOGUE.items() if spec.kind == "latency" and spec.ratio is not None}


def test_request_latency_p99s_need_enough_observations() -> None:
    guarded = {name: spec.min_traffic for name, spec in CATALOGUE.items()
               if "histogram_quantile(0.99" in spec.promql and spec.min_traffic is not None}
    assert set(guarded) >= {"queue_wait_p99", "ttft_p99", "request_p99", "engine_ttft_p99"}
    # Counted over the p99's own 5-min window.
    assert all("[5m]" in g.promql and g.minimum >= P99_MIN_COUNT for g in guarded.values())
    # The peers' median inter-token latency: requests over the same window.
    peer = CATALOGUE["engine_itl_peer"]
    assert "histogram_quantile(0.5" in peer.promql and peer.min_traffic is not None
    assert "[5m]" in peer.min_traffic.promql and peer.min_traffic.minimum == PEER_MIN_COUNT


@pytest.mark.parametrize(("requests_5m", "judged"), [(30.0, False), (85.0, True)])
def test_a_light_nodes_queue_wait_is_judged(requests_5m: float, judged: bool) -> None:
    """A gateway admitting too few at night: 0.3 requests a second, every 5-min window holding
    80-100 of them, and each waiting seconds. Its queue wait is judged (it persists far beyond one
    slow request); six requests a minute are too few to judge."""
    waits = frame({"n1": _burst(5, 30, 15.0, 0.005)})
    traffic = frame({"n1": np.full(ROWS, requests_5m)})
    events = evaluate_signal(CATALOGUE["queue_wait_p99"], SeriesFrame(waits, {"n1": {"node": "n1"}}),
                             traffic=traffic, step_s=60.0)
    assert bool(events) == judged


@pytest.mark.parametrize(("requests_5m", "flagged"), [(30.0, False), (135.0, True), (900.0, True)])
def test_a_node_slower_than_its_peers_counts_only_with_traffic(requests_5m: float, flagged: bool) -> None:
    # Five same-model nodes at night; one node's median inter-token latency 0.062 s against 0.048 s
    # all through: 30 requests in 5 min are too few to say, 135 (0.45 a second) make it a slower node.
    cols = {f"n{i}": np.full(ROWS, 0.048 + 0.0005 * i, dtype=np.float32) for i in range(5)}
    cols["n4"][:] = 0.062
    labels = {c: {"node": c, "model": "m"} for c in cols}
    traffic = frame({c: np.full(ROWS, requests_5m) for c in cols})
    events = evaluate_signal(CATALOGUE["engine_itl_peer"], SeriesFrame(frame(cols), labels), traffic=traffic,
                             step_s=60.0)
    assert [e.entity["node"] for e in events] == (["n4"] if flagged else [])


def _peak_yesterday(bursts: bool) -> dict[float, pd.DataFrame]:
    """Queue wait a day earlier: 5 ms, with (``bursts``) spells at 0.4 s a fifth of the time."""
    rows = ROWS + 60
    yesterday = np.full(rows, 0.005)
    if bursts:
        for start in range(0, rows, 10):
            yesterday[start:start + 2] = 0.4
    index = pd.date_range(at(-30) - pd.Timedelta(days=1), periods=rows, freq="60s")
    return {86400.0: frame({"s": yesterday}).set_axis(index, axis=0)}


@pytest.mark.parametrize(("bursts", "flagged"), [(True, False), (False, True)])
def test_the_p99_margin_scales_with_its_spread_at_that_hour(bursts: bool, flagged: bool) -> None:
    # 0.42 s against a 5 ms baseline for 20 minutes: the daily peak's usual bursts, or a fault.
    values = frame({"s": _burst(10, 20, 0.42, 0.005)})
    traffic = frame({"s": np.full(ROWS, 500.0)})
    events = evaluate_signal(CATALOGUE["queue_wait_p99"], SeriesFrame(values),
                             history=_peak_yesterday(bursts), traffic=traffic, step_s=60.0)
    assert bool(events) is flagged


@pytest.mark.parametrize(("step_s", "requests_a_minute", "detected"), [
    (60.0, 5.0, True),  # four quiet minutes together hold the 20 requests the ratio needs
    (15.0, 5.0, True),  # the same on a finer grid: the windows summed do not overlap
    (60.0, 1.5, False),  # ten minutes hold 15 requests: still too few to judge
    (60.0, 30.0, True),  # a busy node: its own minute holds enough
])
def test_a_light_nodes_error_share_is_judged_over_enough_minutes(step_s: float, requests_a_minute: float,
                                                                 detected: bool) -> None:
    """One request in ten answered 504 for half an hour on a node with too few requests a minute for
    the 1-min ratio's guard: judged over as many minutes before each as hold 20 requests."""
    rows = int(3600 / step_s)
    share = np.where((np.arange(rows) >= rows // 4) & (np.arange(rows) < 3 * rows // 4), 0.1, 0.0)
    values = frame({"n1": share}, step_s)
    traffic = frame({"n1": np.full(rows, requests_a_minute)}, step_s)
    series = SeriesFrame(values, {"n1": {"node": "n1"}})
    events = evaluate_signal(CATALOGUE["error_504_ratio"], series, traffic=traffic, step_s=step_s)
    assert bool(events) == detected, events
    if detected:
        (event,) = events
        assert event.value == pytest.approx(0.1, abs=0.02)
        assert at(rows // 4, step_s) <= event.onset <= at(rows // 4 + 4 * 60 / step_s, step_s)


def test_widening_sums_whole_windows_back_from_each_row() -> None:
    values = frame({"n1": [0.0, 0.0, 0.2, 0.2, 0.0, 0.5]})
    counts = np.array([[5.0], [5.0], [5.0], [5.0], [5.0], [40.0]])
    widened, summed = widen_ratio(values, counts, 20.0, 60.0, 600.0, 60.0)
    assert summed[:, 0].tolist() == [5.0, 5.0, 5.0, 20.0, 20.0, 40.0]
    assert widened["n1"].round(3).tolist() == [0.0, 0.0, 0.2, 0.1, 0.1, 0.5]


def _fleet_yesterday(bursty: list[str], nodes: list[str]) -> dict[float, pd.DataFrame]:
    """Queue wait a day earlier on every node: 5 ms, with spells at 0.4 s on the ``bursty`` ones."""
    one = _peak_yesterday(bursts=True)[86400.0]["s"].to_numpy()
    quiet = np.full(len(one), 0.005)
    index = _peak_yesterday(bursts=True)[86400.0].index
    return {86400.0: frame({n: one if n in bursty else quiet for n in nodes}).set_axis(index, axis=0)}


@pytest.mark.parametrize(("nodes", "bursty", "flagged"), [
    (["n1", "n2", "n3", "n4", "n5"], ["n2", "n3", "n4", "n5"], False),  # the fleet's usual bursts
    (["n1", "n2", "n3", "n4", "n5"], ["n2", "n3", "n4"], False),  # most of the others had them
    (["n1", "n2", "n3", "n4", "n5"], ["n2"], True),  # one bursty neighbour does not set the floor
    (["n1", "n2", "n3"], ["n2", "n3"], True),  # three nodes are too few to speak for the fleet
])
def test_a_nodes_p99_margin_reads_its_like_nodes_spread_at_that_hour(nodes: list[str], bursty: list[str],
                                                                       flagged: bool) -> None:
    # n1 had no bursts at this hour yesterday; today it holds 0.42 s for 20 minutes. Where most of
    # its like nodes burst like that at this hour, that is the fleet's peak, not n1's fault.
    cols = {n: (_burst(10, 20, 0.42, 0.005) if n == "n1" else np.full(ROWS, 0.005)) for n in nodes}
    labels = {n: {"node": n, "service": "chat", "model": "m"} for n in nodes}
    traffic = frame({n: np.full(ROWS, 500.0) for n in nodes})
    events = evaluate_signal(CATALOGUE["queue_wait_p99"], SeriesFrame(frame(cols), labels),
                             history=_fleet_yesterday(bursty, nodes), traffic=traffic, step_s=60.0)
    assert [e.entity["node"] for e in events] == (["n1"] if flagged else [])
