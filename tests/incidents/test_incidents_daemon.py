"""The analyzer daemon: a real ``oximeter analyze`` killed mid-incident and restarted (same incident,
no second "opened"), SIGTERM, its metrics; and the cycle's source-down back-off and notice."""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import requests
from incident_cases import at, ev
from pg_server import StoreSpace

from analyzer.detection.events import AnomalyEvent
from analyzer.diagnosis.case import Snapshot
from analyzer.diagnosis.topology import Topology
from analyzer.incidents.lifecycle import Change, Incident, IncidentSettings
from analyzer.incidents.store import IncidentStore
from analyzer.service.daemon import Analyzer
from analyzer.service.daemon_metrics import DaemonMetrics
from analyzer.service.pipeline import snapshot_from_frames, topology_from_frames
from analyzer.service.settings import AnalyzerSettings
from analyzer.signals.frame import SeriesFrame
from oximeter.store import connect
from stack.ports import wait_port
from stack.procs import ManagedProcess, http_ok, oximeter_argv, wait_until

START = "2026-03-02T10:10:00Z"


def signal_file(path: Path) -> Path:
    """Two hours at 15 s: a paging Xid on n1/GPU 2 from 10:00 on, GPU utilisation flat."""
    index = pd.date_range("2026-03-02T09:00:00Z", periods=480, freq="15s")
    xid = pd.DataFrame({"timestamp": index, "signal": "xid_paging", "node": "n1", "gpu": "2", "xid": "79",
                        "value": [1.0 if i >= 240 else 0.0 for i in range(len(index))]})
    util = pd.DataFrame({"timestamp": index, "signal": "gpu_utilization_p95", "node": "n1", "gpu": "2",
                         "value": 0.5})
    pd.concat([xid, util]).to_parquet(path, index=False)
    return path


def _open_ids(port: int) -> list[str]:
    found = requests.get(f"http://127.0.0.1:{port}/api/incidents", params={"state": "open"}, timeout=5).json()
    return [i["id"] for i in found["incidents"]]


def _cycles(port: int) -> float:
    text = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    lines = [ln for ln in text.splitlines() if ln.startswith("oximeter_analyzer_cycle_seconds_count")]
    return float(lines[0].split()[-1]) if lines else 0.0


def test_kill_mid_incident_and_restart(tmp_path: Path, stores: StoreSpace,
                                       start_process: Callable[..., ManagedProcess]) -> None:
    """On either store: the killed daemon's writer lock goes with it, and its successor resumes the
    open incident without announcing it again."""
    data, store_path = signal_file(tmp_path / "signals.parquet"), stores / "oximeter.db"

    def argv(port_file: Path) -> list[str]:
        return oximeter_argv("analyze", "--signals", str(data), "--replay-start", START, "--speed", "1",
                             "--store", str(store_path), "--port", "0", "--port-file", str(port_file))
    first = start_process("analyze-1", argv(tmp_path / "api-1.port"))
    port = wait_port(first, tmp_path / "api-1.port")
    opened = 'oximeter_incidents_open{layer="infrastructure",severity="critical"} 1.0'
    # The cycle saves the incident (the API sees it), hands it to the outbox, then updates its gauges.
    first.wait_ready(lambda: http_ok(f"http://127.0.0.1:{port}/openapi.json") and _open_ids(port)
                     and opened in requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text, 60)
    (incident_id,) = _open_ids(port)
    metrics = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    assert 'oximeter_anomalies_active{layer="infrastructure",signal="xid_paging"} 1.0' in metrics
    assert "oximeter_analyzer_source_up 1.0" in metrics
    first.signal(signal.SIGKILL)
    wait_until(lambda: not first.running, 30, what="analyze killed")

    second = start_process("analyze-2", argv(tmp_path / "api-2.port"))
    port = wait_port(second, tmp_path / "api-2.port")
    second.wait_ready(lambda: http_ok(f"http://127.0.0.1:{port}/metrics") and _cycles(port) >= 1, 60)
    assert _open_ids(port) == [incident_id]
    assert second.stop() == 0  # SIGTERM: clean shutdown
    assert "analyzer stopped" in second.log_tail(50)
    assert "opened" not in second.log_tail(200)
    conn = connect(store_path)
    found = conn.execute("SELECT key, emitted_at IS NOT NULL FROM incident_changes").fetchall()
    rows = [(r[0], bool(r[1])) for r in found]
    conn.close()
    assert rows == [(f"{incident_id}:opened:1", True)]


class Recorder:
    """A notifier that keeps what it was given."""

    def __init__(self) -> None:
        self.changes: list[str] = []
        self.notices: list[str] = []

    def notify(self, change: Change, incident: Incident | None) -> None:
        self.changes.append(change.key)

    def notice(self, key: str, text: str) -> None:
        self.notices.append(text)


class Flaky:
    """A pipeline whose source is unreachable while ``down`` is set."""

    def __init__(self, events: list[AnomalyEvent]) -> None:
        self.events, self.down = events, False
        self.remembered: list[Any] = []

    def run(self, now: datetime) -> tuple[list[AnomalyEvent], dict[str, SeriesFrame]]:
        if self.down:
            raise requests.ConnectionError("connection refused")
        return self.events, {}

    def snapshot(self, frames: Mapping[str, SeriesFrame], now: datetime) -> Snapshot:
        return snapshot_from_frames(frames)

    def remember(self, spans: Iterable[Any]) -> None:
        self.remembered = list(spans)


def test_source_down_backs_off_notices_once_and_recovers(tmp_path: Path) -> None:
    now = [at(2)]
    pipeline = Flaky([ev("xid_paging", 1, 0, node="n1", gpu="2", xid="79")])
    notifier, metrics = Recorder(), DaemonMetrics()
    analyzer = Analyzer(pipeline, IncidentStore(connect(tmp_path / "s.db")), IncidentSettings(), Topology(),
                        notifier, clock=lambda: now[0], metrics=metrics)
    assert analyzer.cycle() and len(notifier.changes) == 1
    # The open incident's evidence goes back to the pipeline, to stay out of its baselines.
    assert [(e.signal, e.labels) for e in pipeline.remembered] == [
        ("xid_paging", (("gpu", "2"), ("node", "n1"), ("xid", "79")))]
    pipeline.down = True
    assert [analyzer.cycle() for _ in range(3)] == [False, False, False]
    assert metrics.registry.get_sample_value("oximeter_analyzer_source_up") == 0
    assert analyzer.wait_s(30) == 240
    assert notifier.notices == ["analyzer cannot see: the metrics source failed (ConnectionError); "
                                "incidents are not being detected until it recovers"]
    pipeline.down = False
    now[0] = at(3)
    assert analyzer.cycle()
    assert metrics.registry.get_sample_value("oximeter_analyzer_source_up") == 1
    assert analyzer.wait_s(30) == 30 and len(notifier.changes) == 1


def test_silenced_changes_are_marked_but_not_sent(tmp_path: Path) -> None:
    store = IncidentStore(connect(tmp_path / "s.db"))
    pipeline = Flaky([ev("xid_paging", 1, 0, node="n1", gpu="2", xid="79")])
    notifier = Recorder()
    clock = [at(2)]
    analyzer = Analyzer(pipeline, store, IncidentSettings(resolve_after_s=60), Topology(), notifier,
                        clock=lambda: clock[0])
    analyzer.cycle()
    (inc,) = analyzer.tracker.incidents
    store.silence(inc.id, at(60), "bob", "maintenance", at(2))
    pipeline.events = []
    clock[0] = at(10)
    analyzer.cycle()
    assert notifier.changes == [f"{inc.id}:opened:1"]
    assert store.pending_changes() == []


def test_snapshot_and_topology_from_frames() -> None:
    index = pd.date_range("2026-03-02T10:00:00Z", periods=3, freq="15s")
    util = SeriesFrame(pd.DataFrame({"gpu=0,node=n1": [0.2, 0.3, float("nan")]}, index=index))
    info = SeriesFrame(pd.DataFrame({"k": [1.0, 1.0, 1.0]}, index=index),
                       {"k": {"service": "chat", "node": "n1", "model": "m", "instance": "10.0.0.1:8000"}})
    snap = snapshot_from_frames({"gpu_utilization_p95": util, "target_info": info})
    assert snap["gpu_utilization_p95"] == {(("gpu", "0"), ("node", "n1")): pytest.approx(0.3)}
    topo = topology_from_frames({"target_info": info}, Topology())
    assert topo.service_nodes == {"chat": frozenset({"n1"})}
    assert topo.instance_nodes == {"10.0.0.1:8000": "n1"}


@pytest.mark.parametrize(("overrides", "opened"), [({}, 1), ({"ttft_p99": {"opens_incident": False}}, 0)])
def test_the_cycle_opens_by_the_configured_catalogue(tmp_path: Path, overrides: dict[str, dict[str, bool]],
                                                     opened: int) -> None:
    catalogue = AnalyzerSettings(signals=overrides).catalogue()
    notifier = Recorder()
    # TTFT and end-to-end latency up together: two anomalous signals, enough without a rule.
    analyzer = Analyzer(Flaky([ev("ttft_p99", 4.0, 1.0, node="n1", service="chat"),
                               ev("request_p99", 9.0, 3.0, node="n1", service="chat", route="/v1/chat")]),
                        IncidentStore(connect(tmp_path / "s.db")), IncidentSettings(), Topology(), notifier,
                        clock=lambda: at(2), catalogue=catalogue)
    assert analyzer.cycle()
    assert len(notifier.changes) == opened and len(analyzer.tracker.incidents) == opened
