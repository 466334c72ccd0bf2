"""The frame source: raw simulator history → catalogue signals (PromQL semantics), signal files,
step-aligned lookback sampling, incremental live windows and accelerated replay time."""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from analyzer_frames import write_history

from analyzer.detection.evaluate import evaluate_signal
from analyzer.service.pipeline import CyclePipeline
from analyzer.signals.catalogue import CATALOGUE
from analyzer.signals.frame import SeriesFrame
from analyzer.signals.query import bucket_quantile
from analyzer.signals.sources.base import LiveWindow, ReplayClock, align
from analyzer.signals.sources.frames import FrameSource, write_signal_file
from analyzer.signals.spec import SignalSpec, traffic_name

T0 = datetime(2026, 3, 1, tzinfo=UTC)
STEP = 15.0
ROWS = 240  # one hour


def gpu(node: str, index: int) -> tuple[tuple[str, str], ...]:
    return (("gpu", str(index)), ("gpu_model", "H100"), ("instance", "x:1"), ("node", node))


@pytest.fixture
def history(tmp_path: Path) -> Path:
    temps = {("oximeter_gpu_temperature_celsius", gpu("n1", i)): np.full(ROWS, 60.0 + i) for i in range(4)}
    temps[("oximeter_gpu_temperature_celsius", gpu("n1", 2))][120:] = 90.0  # throttling from row 120
    ecc = np.cumsum(np.r_[np.zeros(100), np.full(ROWS - 100, 10.0)])  # +10 per 15 s: +200 per 5 min
    series = {**temps, ("oximeter_gpu_ecc_errors_total", (*gpu("n1", 0), ("kind", "corrected"))): ecc,
              ("oximeter_gpu_ecc_errors_total", (*gpu("n1", 0), ("kind", "uncorrected"))): np.zeros(ROWS)}
    # queue_wait histogram: 60 requests per step, all under 0.1 s, then under 2.5 s from row 150.
    bounds = ["0.1", "0.5", "2.5", "+Inf"]
    per_step = {b: np.full(ROWS, 60.0) for b in bounds}
    per_step["0.1"][150:] = 0.0
    per_step["0.5"][150:] = 0.0
    for b in bounds:
        labs = (("le", b), ("node", "n1"), ("service", "chat"))
        series[("oximeter_queue_wait_seconds_bucket", labs)] = np.cumsum(per_step[b])
    series[("oximeter_queue_length", (("node", "n1"), ("service", "chat")))] = np.r_[np.full(ROWS - 10, 3.0),
                                                                                    np.full(10, np.nan)]
    # Two processes on n1 share its 100 GiB; n2's process has no host reading.
    for node, proc, gib in (("n1", "vllm", 8.0), ("n1", "tokenizer", 2.0), ("n2", "vllm", 5.0)):
        labs = (("instance", f"{node}:9400"), ("node", node), ("process", proc))
        series[("oximeter_process_resident_memory_bytes", labs)] = np.full(ROWS, gib * 2**30)
    series[("oximeter_host_memory_total_bytes", (("instance", "n1:9400"), ("node", "n1")))] = \
        np.full(ROWS, 100.0 * 2**30)
    write_history(tmp_path, series, T0, STEP)
    return tmp_path


def test_temperature_is_max_without_instance(history: Path) -> None:
    source = FrameSource.from_history(history)
    got = source.fetch(CATALOGUE["gpu_temperature"], T0, T0 + timedelta(hours=1), 60.0)
    assert sorted(got.values.columns) == [f"gpu={i},gpu_model=H100,node=n1" for i in range(4)]
    assert got.labels["gpu=2,gpu_model=H100,node=n1"] == {"gpu": "2", "gpu_model": "H100", "node": "n1"}
    col = got.values["gpu=2,gpu_model=H100,node=n1"]
    assert col.iloc[29] == 60.0 + 2 and col.iloc[30] == 90.0  # row 120 = 30 min = grid row 30


def test_ecc_increase_over_five_minutes(history: Path) -> None:
    source = FrameSource.from_history(history)
    got = source.fetch(CATALOGUE["ecc_corrected_increase"], T0, T0 + timedelta(hours=1), STEP).values
    [column] = got.columns
    assert "kind" not in column
    # Ten increments of 10 by row 109 (the first lands on row 100); 20 steps = 5 minutes later.
    assert got[column].iloc[99] == 0.0 and got[column].iloc[109] == 100.0 and got[column].iloc[200] == 200.0


def test_rss_is_a_share_of_its_hosts_memory(history: Path) -> None:
    # ``/ on (node) group_left``: every process of a node divided by that node's one total.
    source = FrameSource.from_history(history)
    got = source.fetch(CATALOGUE["process_rss_trend"], T0, T0 + timedelta(hours=1), 60.0).values
    assert sorted(got.columns) == ["node=n1,process=tokenizer", "node=n1,process=vllm"]
    assert got["node=n1,process=vllm"].iloc[-1] == pytest.approx(0.08)
    assert got["node=n1,process=tokenizer"].iloc[-1] == pytest.approx(0.02)


def test_queue_wait_p99_uses_prometheus_interpolation(history: Path) -> None:
    source = FrameSource.from_history(history)
    got = source.fetch(CATALOGUE["queue_wait_p99"], T0, T0 + timedelta(hours=1), STEP).values
    [column] = got.columns
    assert column == "node=n1,service=chat"
    assert got[column].iloc[100] == pytest.approx(0.099)  # 0 + 0.1 × 0.99
    assert got[column].iloc[230] == pytest.approx(0.5 + 2.0 * 0.99)


@pytest.mark.parametrize(("q", "counts", "expected"), [
    (0.5, [10, 20, 20], 0.1),  # rank 10 at the top of the first bucket: its bound
    (0.75, [10, 20, 20], 0.3),  # rank 15, halfway through (0.1, 0.5]
    (0.99, [0, 0, 5], 0.5),  # all in +Inf: the highest finite bound
    (0.5, [0, 0, 0], np.nan),  # no observations
])
def test_bucket_quantile(q: float, counts: list[float], expected: float) -> None:
    bounds = np.array([0.1, 0.5, np.inf])
    got = float(bucket_quantile(q, bounds, np.array([counts], dtype=float))[0])
    if np.isnan(expected):
        assert np.isnan(got)
    else:
        assert got == pytest.approx(expected)


def test_lookback_then_vanished(history: Path) -> None:
    source = FrameSource.from_history(history)
    got = source.fetch(CATALOGUE["queue_length"], T0, T0 + timedelta(minutes=59, seconds=45), STEP).values
    column = got["node=n1,service=chat"]
    # The gauge stops at row 230; max_over_time(1m) and the 5-minute lookback keep it visible.
    assert column.iloc[229] == 3.0 and column.iloc[-1] == 3.0


def test_a_planted_fault_replays_into_one_event(history: Path) -> None:
    source = FrameSource.from_history(history)
    frame = source.fetch(CATALOGUE["gpu_temperature"], T0, T0 + timedelta(hours=1), STEP)
    [event] = evaluate_signal(CATALOGUE["gpu_temperature"], frame)
    assert event.entity == {"gpu": "2", "gpu_model": "H100", "node": "n1"}
    assert event.onset == T0 + timedelta(minutes=30)
    assert event.detected_at == T0 + timedelta(minutes=30, seconds=30)  # the 3rd of n=4 at 15 s


def test_signal_file_round_trip(history: Path, tmp_path: Path) -> None:
    source = FrameSource.from_history(history)
    spec = CATALOGUE["gpu_temperature"]
    whole = source.fetch(spec, T0, T0 + timedelta(hours=1), STEP)
    path = tmp_path / "signals.parquet"
    write_signal_file({spec.name: whole}, path)
    again = FrameSource.from_signal_file(path).fetch(spec, T0, T0 + timedelta(hours=1), STEP)
    pd.testing.assert_frame_equal(again.values.sort_index(axis=1), whole.values.sort_index(axis=1),
                                  check_freq=False)
    assert again.labels == whole.labels


class Counting:
    """A source wrapper that records the requested ranges."""

    def __init__(self, inner: FrameSource) -> None:
        self.inner = inner
        self.calls: list[tuple[datetime, datetime]] = []

    def fetch(self, spec: SignalSpec, start: datetime, end: datetime, step_s: float) -> SeriesFrame:
        self.calls.append((start, end))
        return self.inner.fetch(spec, start, end, step_s)

    def now(self) -> datetime:
        return self.inner.now()


def test_live_window_fetches_only_new_steps(history: Path) -> None:
    source = Counting(FrameSource.from_history(history))
    spec = CATALOGUE["gpu_temperature"]
    live = LiveWindow(spec, window_s=900, step_s=STEP)
    for minute in range(20, 40):
        now = T0 + timedelta(minutes=minute, seconds=7)
        got = live.update(source, now)
        full = source.inner.fetch(spec, align(now, STEP) - timedelta(seconds=900), now, STEP)
        pd.testing.assert_frame_equal(got.values.sort_index(axis=1), full.values.sort_index(axis=1),
                                      check_freq=False)
    assert source.calls[0] == (T0 + timedelta(minutes=5), T0 + timedelta(minutes=20))
    # Then one step of overlap (the newest point may still change) and one new minute.
    assert source.calls[1] == (T0 + timedelta(minutes=19, seconds=45), T0 + timedelta(minutes=21))



def test_a_past_window_reads_ahead_up_to_what_has_settled(history: Path) -> None:
    """A same-time window reads ``ahead_s`` at once and then nothing for that long; it returns
    what a full fetch returns, and never asks for a step after ``settled``."""
    source = Counting(FrameSource.from_history(history))
    spec = CATALOGUE["gpu_temperature"]
    past = LiveWindow(spec, window_s=900, step_s=STEP, ahead_s=600)
    for minute in range(20, 40):
        now = T0 + timedelta(minutes=minute, seconds=7)
        settled = now + timedelta(minutes=7)  # the window's end ages: what follows it may be read
        got = past.update(source, now, settled=settled)
        full = source.inner.fetch(spec, align(now, STEP) - timedelta(seconds=900), now, STEP)
        pd.testing.assert_frame_equal(got.values.sort_index(axis=1), full.values.sort_index(axis=1),
                                      check_freq=False)
        assert all(end <= settled for _, end in source.calls)
    # 20 cycles: the first reads 7 minutes ahead (settled), then one query per 7-10 minutes.
    assert source.calls[0] == (T0 + timedelta(minutes=5), T0 + timedelta(minutes=27))
    assert len(source.calls) == 3

def test_replay_clock_runs_accelerated() -> None:
    ticks = iter([100.0, 101.5])
    clock = ReplayClock(T0, speed=60.0, monotonic=lambda: next(ticks))
    assert clock.now() == T0 + timedelta(seconds=90)


class ByQuery(Counting):
    """A counting wrapper that answers by query like the source it wraps and records each query."""

    def __init__(self, inner: FrameSource) -> None:
        super().__init__(inner)
        self.queries: list[str] = []

    def fetch(self, spec: SignalSpec, start: datetime, end: datetime, step_s: float) -> SeriesFrame:
        self.queries.append(spec.promql)
        return super().fetch(spec, start, end, step_s)

    def query_key(self, spec: SignalSpec) -> Hashable:
        return self.inner.query_key(spec)


@pytest.mark.parametrize("names", [("engine_itl_peer", "engine_itl_p50"),
                                   ("error_504_ratio", "rejected_429_ratio")])
def test_signals_reading_one_query_share_its_windows(tmp_path: Path, names: tuple[str, str]) -> None:
    """Two signals on one query (or two traffic guards on one count) fetch it once a cycle, as either
    of them alone does, and both see the same frame."""
    engine = (("instance", "n1:8000"), ("model_name", "m"), ("node", "n1"))
    gateway = (("node", "n1"), ("service", "chat"))
    steps = np.arange(ROWS, dtype=np.float64)
    series = {("vllm:inter_token_latency_seconds_bucket", (*engine, ("le", le))): steps * share
              for le, share in (("0.05", 20.0), ("0.1", 30.0), ("+Inf", 30.0))}
    series[("vllm:time_to_first_token_seconds_count", engine)] = steps * 2.0
    for code, per_step in (("200", 50.0), ("429", 1.0), ("504", 1.0)):
        series[("oximeter_requests_total", (*gateway, ("code", code)))] = steps * per_step
    write_history(tmp_path, series, T0, STEP)
    inner = FrameSource.from_history(tmp_path)
    fetched: list[Counter[str]] = []
    for catalogue in ({names[0]: CATALOGUE[names[0]]}, {names[1]: CATALOGUE[names[1]]},
                      {n: CATALOGUE[n] for n in names}):
        source = ByQuery(inner)
        pipeline = CyclePipeline(source, catalogue, step_s=STEP, live_s=900.0)
        for minute in (30, 31):
            _, frames = pipeline.run(T0 + timedelta(minutes=minute))
        fetched.append(Counter(source.queries))
    alone = fetched[0] | fetched[1]  # the most either needs of each query
    assert fetched[2] == alone and fetched[2] != fetched[0] + fetched[1]
    queries = {n: CATALOGUE[n].promql for n in names}
    queries |= {traffic_name(n): guard.promql for n in names if (guard := CATALOGUE[n].traffic_spec())}
    shared = [(a, b) for a in queries for b in queries
              if a.startswith(names[0]) and b.startswith(names[1]) and queries[a] == queries[b]]
    assert shared and all(frames[a].values is frames[b].values for a, b in shared)
