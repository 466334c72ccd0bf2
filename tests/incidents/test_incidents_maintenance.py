"""Maintenance windows: what they cover, the daemon's cycle under one (suppressed, told when the
fault outlives it, declared changes expected), and the config, CLI and API that declare them."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import requests
from api_server import ApiServer
from incident_cases import ev
from inprocess import run_main
from pg_server import StoreSpace
from pydantic import SecretStr
from test_incidents_daemon import Flaky, Recorder

from analyzer.diagnosis.topology import Topology
from analyzer.incidents.lifecycle import ChangeEvent, IncidentSettings
from analyzer.incidents.maintenance import MaintenanceWindow
from analyzer.incidents.oncall import OnCall
from analyzer.incidents.store import IncidentStore
from analyzer.service.api import build_app
from analyzer.service.daemon import Analyzer
from oximeter.config import parse_config
from oximeter.errors import ConfigError
from oximeter.inputs import InputValueError
from oximeter.store import connect

NOW = datetime(2026, 12, 5, 22, 0, tzinfo=UTC)
XID = replace(ev("xid_paging", 1, 0, node="n1", gpu="2", xid="79", service="chat"),
              onset=NOW - timedelta(minutes=2), detected_at=NOW - timedelta(minutes=1))


def window(minutes: float = 30, **scope: str) -> MaintenanceWindow:
    return MaintenanceWindow(NOW - timedelta(minutes=5), NOW + timedelta(minutes=minutes),
                             reason="driver upgrade", **scope)


class Cycles:
    """The daemon's cycle on one paging Xid (on n1, GPU 2), its clock moved by hand."""

    def __init__(self, path: Path | str, windows: tuple[MaintenanceWindow, ...] = ()) -> None:
        self.clock = [NOW]
        self.pipeline, self.notifier = Flaky([XID]), Recorder()
        self.store = IncidentStore(connect(path))
        self.analyzer = Analyzer(self.pipeline, self.store, IncidentSettings(resolve_after_s=60), Topology(),
                                 self.notifier, clock=lambda: self.clock[0], maintenance=windows)

    def at(self, minutes: float) -> list[str]:
        """A cycle ``minutes`` after NOW: the change keys chat was told in it."""
        self.clock[0] = NOW + timedelta(minutes=minutes)
        before = len(self.notifier.changes)
        assert self.analyzer.cycle()
        return self.notifier.changes[before:]

    @property
    def incident_id(self) -> str:
        (incident,) = self.analyzer.tracker.incidents
        return incident.id


COVERS = [
    ({"node": "n1"}, True),
    ({"node": "n1", "gpu": "2"}, True),
    ({"node": "n1", "gpu": "0"}, False),
    ({"node": "n2"}, False),
    ({"service": "chat"}, True),
    ({"service": "embed"}, False),
    ({"node": "n1", "service": "embed"}, False),
]


@pytest.mark.parametrize(("scope", "covered"), COVERS, ids=[str(s) for s, _ in COVERS])
def test_a_window_covers_the_incidents_whose_root_cause_lies_under_it(tmp_path: Path, scope: dict[str, str],
                                                                       covered: bool) -> None:
    cycles = Cycles(tmp_path / "s.db")
    cycles.at(0)
    (incident,) = cycles.analyzer.tracker.incidents
    assert window(**scope).covers(incident) is covered


LABELS = [
    ({"node": "n1"}, {"node": "n1"}, True),
    ({"node": "n1"}, {"node": "n1", "service": "chat"}, True),
    ({"node": "n1", "gpu": "2"}, {"node": "n1"}, True),  # a node-wide change during a GPU's work
    ({"node": "n1", "gpu": "2"}, {"node": "n1", "gpu": "3"}, False),
    ({"node": "n1"}, {"node": "n2"}, False),
    ({"node": "n1"}, {}, False),
    ({"service": "chat"}, {"service": "chat", "node": "n4"}, True),
    ({"service": "chat"}, {"node": "n1"}, False),
]


@pytest.mark.parametrize(("scope", "labels", "covered"), LABELS, ids=[f"{s}-{lab}" for s, lab, _ in LABELS])
def test_a_declared_change_is_part_of_the_work_on_its_entity(scope: dict[str, str], labels: dict[str, str],
                                                             covered: bool) -> None:
    assert window(**scope).covers_labels(labels) is covered


def test_an_incident_opened_during_maintenance_is_suppressed_then_told_when_the_fault_outlives_it(
        stores: StoreSpace) -> None:
    cycles = Cycles(stores / "s.db", (window(10, node="n1"),))
    assert cycles.at(0) == []
    inc, oncall = cycles.incident_id, OnCall(cycles.store.conn)
    incident = cycles.store.get(inc)
    assert incident is not None and incident.state == "open"
    reason = "maintenance on node=n1 until 2026-12-05T22:10:00Z: driver upgrade"
    assert oncall.document(cycles.store, incident)["suppressed"] == reason
    assert cycles.at(5) == []
    # The window ends at minute 10 with the Xid still there: chat hears of it now, once.
    assert cycles.at(11) == [f"{inc}:opened:1"]
    assert cycles.at(12) == []
    assert oncall.suppressed_by(inc) is None
    assert [t.kind for t in oncall.timeline(incident) if t.kind == "not_sent"] == ["not_sent"]


def test_a_fault_over_inside_its_window_is_never_told(stores: StoreSpace) -> None:
    cycles = Cycles(stores / "s.db", (window(30, node="n1", gpu="2"),))
    assert cycles.at(0) == []
    cycles.pipeline.events = [replace(XID, cleared_at=NOW + timedelta(minutes=1))]
    told = [cycles.at(m) for m in (2, 5, 10, 31, 40)]
    assert told == [[], [], [], [], []]
    incident = cycles.store.get(cycles.incident_id)
    assert incident is not None and incident.state == "resolved"
    holds = OnCall(cycles.store.conn).holds_of(incident.id)
    assert [h["kind"] for h in holds] == ["opened", "resolved"]


def test_without_a_window_the_same_fault_is_told(tmp_path: Path) -> None:
    cycles = Cycles(tmp_path / "s.db", (window(30, node="n2"),))
    assert cycles.at(0) == [f"{cycles.incident_id}:opened:1"]


@pytest.mark.parametrize(("windows", "attached"), [((), 1), ((window(30, node="n1"),), 0)],
                         ids=["no window", "under a window"])
def test_a_declared_change_under_a_window_is_expected_not_evidence(tmp_path: Path, windows: tuple[
        MaintenanceWindow, ...], attached: int) -> None:
    cycles = Cycles(tmp_path / "s.db", windows)
    cycles.store.record_change_event(ChangeEvent(NOW - timedelta(minutes=1), "restart", "driver reload",
                                                 (("node", "n1"),)), NOW)
    cycles.at(0)
    (incident,) = cycles.analyzer.tracker.incidents
    assert len(incident.changes) == attached


def test_the_cli_declares_lists_and_ends_windows_the_daemon_reads(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    cycles = Cycles(path)
    added = run_main("maintenance", "--store", str(path), "add", "--node", "n1", "--gpu", "2", "--for", "2h",
                     "--reason", "driver upgrade", "--by", "erin")
    assert added.returncode == 0, added.stderr
    assert added.stdout.startswith("maintenance 1: maintenance on node=n1 gpu=2 until ")
    listed = run_main("maintenance", "--store", str(path), "list").stdout
    assert listed.startswith("1  on ") and listed.rstrip().endswith("node=n1 gpu=2  driver upgrade (by erin)")
    cycles.clock[0] = datetime.now(UTC)  # the CLI stamps the wall clock
    cycles.pipeline.events = [replace(XID, onset=cycles.clock[0] - timedelta(minutes=2),
                                      detected_at=cycles.clock[0] - timedelta(minutes=1))]
    assert cycles.analyzer.cycle() and cycles.notifier.changes == []
    ended = run_main("maintenance", "--store", str(path), "end", "1")
    assert (ended.returncode, ended.stdout) == (0, "maintenance 1 ended\n")
    assert run_main("maintenance", "--store", str(path), "list").stdout == "no maintenance windows\n"
    cycles.clock[0] = datetime.now(UTC) + timedelta(seconds=1)
    assert cycles.analyzer.cycle() and cycles.notifier.changes == [f"{cycles.incident_id}:opened:1"]


BAD_CLI = [
    (("--for", "2h", "--reason", "x"), "window: name a node or a service"),
    (("--gpu", "2", "--for", "2h", "--reason", "x"), "window: a GPU needs its node"),
    (("--node", "n1", "--from", "2026-01-02", "--to", "2026-01-01", "--reason", "x"),
     "window: to (2026-01-01T00:00:00Z) must be after from (2026-01-02T00:00:00Z)"),
    (("--node", "n1", "--from", "2026-01-01", "--to", "2026-01-02", "--reason", "x"),
     "window: it ended already (2026-01-02T00:00:00Z)"),
    (("--node", "n1", "--for", "soon", "--reason", "x"),
     "for: expected a duration such as 90s, 15m, 24h or 7d, got 'soon'"),
]


@pytest.mark.parametrize(("args", "reason"), BAD_CLI, ids=[" ".join(a) for a, _ in BAD_CLI])
def test_the_cli_refuses_a_window_with_a_reason(tmp_path: Path, args: tuple[str, ...], reason: str) -> None:
    out = run_main("maintenance", "--store", str(tmp_path / "s.db"), "add", *args)
    assert (out.returncode, out.stderr) == (2, f"oximeter maintenance: {reason}\n")


def test_the_config_declares_windows() -> None:
    config = parse_config({"incidents": {"maintenance": [
        {"node": "n3", "gpu": 2, "from": "2026-12-05T22:00:00", "to": "2026-12-06T02:00:00Z",
         "reason": "driver upgrade"}]}})
    (declared,) = config.incidents.maintenance
    assert declared.window() == MaintenanceWindow(NOW, NOW + timedelta(hours=4), "n3", "2", None,
                                                  "driver upgrade", "config")
    with pytest.raises(ConfigError, match="a GPU needs its node"):
        parse_config({"incidents": {"maintenance": [{"gpu": 2, "from": "2026-12-05", "to": "2026-12-06"}]}})
    with pytest.raises(InputValueError, match="name a node or a service"):
        MaintenanceWindow(NOW, NOW + timedelta(hours=1))


TOKEN = "maintenance-token"


@pytest.fixture
def api(tmp_path: Path) -> Iterator[ApiServer]:
    store = IncidentStore(connect(tmp_path / "s.db"))
    server = ApiServer(build_app(store, SecretStr(TOKEN), clock=lambda: NOW))
    yield server
    server.stop()
    store.conn.close()


def test_the_api_declares_and_lists_windows(api: ApiServer) -> None:
    auth = {"Authorization": f"Bearer {TOKEN}"}
    body = {"node": "n3", "service": "chat", "for": "4h", "reason": "driver upgrade", "by": "frank"}
    assert requests.post(api.url("/api/maintenance"), json=body, timeout=30).status_code == 401
    made = requests.post(api.url("/api/maintenance"), json=body, headers=auth, timeout=30)
    assert made.status_code == 201
    assert made.json() == {"id": 1, "from": "2026-12-05T22:00:00Z", "to": "2026-12-06T02:00:00Z",
                           "node": "n3", "gpu": None, "service": "chat", "reason": "driver upgrade",
                           "by": "frank"}
    assert requests.get(api.url("/api/maintenance"), timeout=30).json() == {"maintenance": [made.json()]}
    bad = requests.post(api.url("/api/maintenance"), json={**body, "node": None, "service": None},
                        headers=auth, timeout=30)
    assert (bad.status_code, bad.json()) == (400, {"error": "window: name a node or a service"})
    past = requests.post(api.url("/api/maintenance"), json={**body, "from": "2026-01-01T00:00:00Z"},
                         headers=auth, timeout=30)
    assert (past.status_code, past.json()) == (400, {"error": "window: it ended already"})
