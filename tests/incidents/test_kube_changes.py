"""Kubernetes restarts and rollouts become change events by themselves: each rise once, with the
restarted pod's node so that incidents on that node list it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import requests
from incident_cases import at, ev

from analyzer.detection.events import AnomalyEvent
from analyzer.diagnosis.case import Snapshot
from analyzer.diagnosis.topology import Topology
from analyzer.incidents.lifecycle import Change, Incident, IncidentSettings
from analyzer.incidents.model import ChangeEvent
from analyzer.incidents.store import IncidentStore
from analyzer.service.daemon import Analyzer
from analyzer.service.kube_changes import ENGINE_RESTARTS, FEEDS, KubeChangePoller, rises
from analyzer.signals.frame import SeriesFrame
from analyzer.signals.spec import SignalSpec
from oximeter.store import connect

T0 = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
STEP = 15.0
POD = {"node": "n1", "namespace": "llm", "pod": "vllm-n1"}
DEPLOYMENT = {"namespace": "llm", "deployment": "vllm"}


class Levels:
    """A source holding one level series per feed, on a 15 s grid from T0 (NaN: no sample)."""

    def __init__(self, restarts: list[float], generation: list[float]) -> None:
        self.series = {FEEDS[0].spec.name: (POD, restarts), FEEDS[1].spec.name: (DEPLOYMENT, generation)}

    def fetch(self, spec: SignalSpec, start: datetime, end: datetime, step_s: float) -> SeriesFrame:
        labels, values = self.series[spec.name]
        full = pd.Series(values, index=pd.date_range(T0, periods=len(values), freq=f"{int(STEP)}s"))
        key = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
        return SeriesFrame(pd.DataFrame({key: full[start:end]}), {key: labels})

    def now(self) -> datetime:
        return T0


def test_rises_ignore_gaps_and_falls() -> None:
    index = pd.date_range(T0, periods=7, freq="15s")
    found = rises(pd.Series([0, 0, np.nan, 1, 1, 0, 2], index=index, dtype=float))
    assert [(t, before, after) for t, before, after in found] == [(index[3], 0.0, 1.0), (index[6], 0.0, 2.0)]


def test_each_change_is_recorded_once_with_its_node(tmp_path: Path) -> None:
    store = IncidentStore(connect(tmp_path / "oximeter.db"))
    # n1's engine restarts at 1m; the deployment rolls out generation 2 at 2m.
    source = Levels(restarts=[0.0] * 4 + [1.0] * 16, generation=[1.0] * 8 + [2.0] * 12)
    poller = KubeChangePoller(source, store, STEP)
    first = poller.poll(T0 + timedelta(minutes=1, seconds=30))
    assert [(c.kind, c.at, dict(c.labels), c.source) for c in first] == [
        ("restart", T0 + timedelta(minutes=1), POD, "kubernetes")]
    assert first[0].description == "pod llm/vllm-n1 on n1: container restarted once"
    second = poller.poll(T0 + timedelta(minutes=4))
    assert [(c.kind, c.at, c.labels) for c in second] == [("deploy", T0 + timedelta(minutes=2), ())]
    assert second[0].description == "deployment llm/vllm rolled out (generation 1 to 2)"
    # A restarted analyzer looks back again and finds both already recorded.
    assert KubeChangePoller(source, store, STEP).poll(T0 + timedelta(minutes=4, seconds=30)) == []
    stored = store.change_events(T0, T0 + timedelta(minutes=5))
    assert [(c.kind, c.source) for c in stored] == [("restart", "kubernetes"), ("deploy", "kubernetes")]


class EngineStarts(Levels):
    """One engine's process start time (vLLM's API server): a crash at 1m, a new process at 1m30s."""

    def __init__(self) -> None:
        started = T0.timestamp() - 3600
        self.series = {ENGINE_RESTARTS.spec.name: (
            {"node": "n2", "instance": "n2:8000"},
            [started] * 4 + [float("nan")] + [T0.timestamp() + 90] * 15)}


def test_an_engine_process_restarted_is_a_change_on_its_node_whatever_restarted_it(tmp_path: Path) -> None:
    store = IncidentStore(connect(tmp_path / "oximeter.db"))
    poller = KubeChangePoller(EngineStarts(), store, STEP, (ENGINE_RESTARTS,))
    found = poller.poll(T0 + timedelta(minutes=3))
    assert [(c.kind, c.at, dict(c.labels), c.description, c.source) for c in found] == [
        ("restart", T0 + timedelta(seconds=75), {"node": "n2", "instance": "n2:8000"},
         "engine n2:8000 on n2: process restarted", "vllm")]
    assert poller.poll(T0 + timedelta(minutes=4)) == []


class OneEvent:
    """A pipeline that always finds the same paging Xid on n1."""

    def run(self, now: datetime) -> tuple[list[AnomalyEvent], dict[str, SeriesFrame]]:
        return [ev("xid_paging", 1, 0, node="n1", gpu="2", xid="79")], {}

    def snapshot(self, frames: Mapping[str, SeriesFrame], now: datetime) -> Snapshot:
        return {}

    def remember(self, spans: Iterable[Any]) -> None:
        pass


class Silent:
    def notify(self, change: Change, incident: Incident | None) -> None:
        pass

    def notice(self, key: str, text: str) -> None:
        pass


def test_the_cycle_records_them_and_the_incident_on_that_node_lists_them(tmp_path: Path) -> None:
    store = IncidentStore(connect(tmp_path / "s.db"))
    restart = ChangeEvent(at(1.5), "restart", "pod llm/vllm-n1 on n1: container restarted once",
                          tuple(sorted(POD.items())), "kubernetes")
    polled: list[datetime] = []

    def feed(now: datetime) -> None:
        polled.append(now)
        if len(polled) == 1:
            raise requests.ConnectionError("kube-state-metrics series unreadable")  # skipped, not fatal
        store.record_change_event(restart, now)

    analyzer = Analyzer(OneEvent(), store, IncidentSettings(), Topology(), Silent(),
                        clock=lambda: at(2), change_feed=feed)
    assert analyzer.cycle()
    assert analyzer.cycle()
    assert polled == [at(2), at(2)]
    (incident,) = analyzer.tracker.incidents
    assert [(c.kind, c.description, c.source) for c in incident.changes] == [
        ("restart", restart.description, "kubernetes")]
