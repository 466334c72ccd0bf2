"""``incidents list`` and ``GET /api/incidents``: severity, GPU and an absolute or relative time range,
on a store filled with incidents that each miss the question by one filter."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import requests
from api_server import ApiServer
from incident_cases import ev
from inprocess import run_main

from analyzer.diagnosis.topology import Topology
from analyzer.incidents.lifecycle import IncidentSettings, IncidentTracker, findings
from analyzer.incidents.model import Incident
from analyzer.incidents.store import IncidentQuery, IncidentStore, QueryError
from analyzer.service.api import build_app
from oximeter.store import connect

NOW = datetime(2026, 12, 5, 9, 0, tzinfo=UTC)


def _xid() -> Incident:
    """One real incident of the tracker (a paging Xid), the template of the rest."""
    tracker = IncidentTracker(IncidentSettings())
    event = ev("xid_paging", 1, 0, node="n2", gpu="3", xid="79")
    tracker.step(findings([event], Topology(), now=event.detected_at), event.detected_at)
    (incident,) = tracker.incidents
    return incident


def incident(name: str, onset: str, *, severity: str = "critical",
             on: tuple[tuple[str, str], ...] = (("n2", "3"),), hours: float | None = 1.0) -> Incident:
    """The template moved to ``onset``, on (node, gpu) pairs, resolved ``hours`` later (None: open)."""
    base = _xid()
    start = datetime.fromisoformat(onset).replace(tzinfo=UTC)
    evidence = tuple(replace(base.evidence[0], labels=(("gpu", gpu), ("node", node), ("xid", "79")),
                             onset=start, detected_at=start + timedelta(minutes=1)) for node, gpu in on)
    end = None if hours is None else start + timedelta(hours=hours)
    return replace(base, id=name, severity=severity, evidence=evidence,
                   nodes=tuple(sorted({n for n, _ in on})),
                   first_onset=start, opened_at=start + timedelta(minutes=1), updated_at=end or NOW,
                   last_active_at=end or NOW, resolved_at=end, state="open" if end is None else "resolved")


# Each name says why it is, or is not, among "every critical incident on GPU 3 of n2 in November".
FILLED = [
    incident("hit-november", "2026-11-10T04:00:00"),
    incident("hit-open-since-october", "2026-10-30T12:00:00", hours=None),
    incident("miss-other-gpu", "2026-11-12T00:00:00", on=(("n2", "1"),)),
    incident("miss-gpu3-of-another-node", "2026-11-13T00:00:00", on=(("n1", "3"), ("n2", "0"))),
    incident("miss-warning", "2026-11-15T00:00:00", severity="warning"),
    incident("miss-ended-in-october", "2026-10-20T00:00:00", hours=24),
    incident("miss-began-in-december", "2026-12-02T00:00:00"),
]
QUESTION = ("--severity", "critical", "--gpu", "3", "--node", "n2",
            "--from", "2026-11-01", "--to", "2026-12-01")


@pytest.fixture(scope="module")
def store_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("query") / "oximeter.db"
    store = IncidentStore(connect(path))
    store.save(FILLED)
    store.conn.close()
    return path


def test_the_on_call_question_from_the_cli(store_path: Path) -> None:
    out = run_main("incidents", "--store", str(store_path), "list", *QUESTION, "--format", "json")
    assert out.returncode == 0, out.stderr
    assert [i["id"] for i in json.loads(out.stdout)] == ["hit-november", "hit-open-since-october"]
    table = run_main("incidents", "--store", str(store_path), "list", *QUESTION, "--format", "table")
    assert [line.split()[0] for line in table.stdout.splitlines()] == [
        "ID", "hit-november", "hit-open-since-october"]


QUERIES = [
    ({"gpu": "3"}, ["miss-began-in-december", "miss-warning", "miss-gpu3-of-another-node", "hit-november",
                    "hit-open-since-october", "miss-ended-in-october"]),
    ({"gpu": "3", "node": "n1"}, ["miss-gpu3-of-another-node"]),
    ({"severity": "warning"}, ["miss-warning"]),
    ({"from": "2026-11-30T00:00:00Z"}, ["miss-began-in-december", "hit-open-since-october"]),
    ({"to": "2026-10-25"}, ["miss-ended-in-october"]),
    # Relative: three days before NOW (Dec 5 09:00) the December incident had ended; the open one had not.
    ({"from": "3d"}, ["hit-open-since-october"]),
    ({"from": "4d", "to": "now"}, ["miss-began-in-december", "hit-open-since-october"]),
    # An offset counts: 05:30+01:00 is 04:30Z, inside the November incident; 04:30+01:00 is before it.
    ({"from": "2026-11-10T05:30:00+01:00", "to": "2026-11-10T05:30:00+01:00"},
     ["hit-november", "hit-open-since-october"]),
    ({"from": "2026-11-10T04:30:00+01:00", "to": "2026-11-10T04:30:00+01:00"}, ["hit-open-since-october"]),
]


@pytest.mark.parametrize(("params", "ids"), QUERIES, ids=[str(p) for p, _ in QUERIES])
def test_query_filters(store_path: Path, params: dict[str, str], ids: list[str]) -> None:
    store = IncidentStore(connect(store_path))
    try:
        assert [i.id for i in store.query(IncidentQuery.from_params(params, NOW), NOW)] == ids
    finally:
        store.conn.close()


BAD = [
    ({"severity": "page"}, "severity: expected one of info, warning, critical, got 'page'"),
    ({"from": "last tuesday"}, "from: expected an ISO-8601 time (2026-11-01, 2026-11-01T08:00:00Z), now, "
                               "or a duration ago (7d), got 'last tuesday'"),
    ({"from": "2026-12-01", "to": "2026-11-01"},
     "from: 2026-12-01T00:00:00Z is after to: 2026-11-01T00:00:00Z"),
    ({"gpu": "3\n"}, "gpu: contains control characters"),
]


@pytest.mark.parametrize(("params", "reason"), BAD, ids=[str(p) for p, _ in BAD])
def test_malformed_filters_name_the_reason(params: dict[str, str], reason: str) -> None:
    with pytest.raises(QueryError) as caught:
        IncidentQuery.from_params(params, NOW)
    assert str(caught.value) == reason


@pytest.fixture(scope="module")
def api(store_path: Path) -> Iterator[ApiServer]:
    store = IncidentStore(connect(store_path))
    server = ApiServer(build_app(store, None, clock=lambda: NOW))
    yield server
    server.stop()
    store.conn.close()


def test_the_api_answers_the_same_question(api: ApiServer) -> None:
    params = {"severity": "critical", "gpu": "3", "node": "n2", "from": "2026-11-01", "to": "2026-12-01"}
    found = requests.get(api.url("/api/incidents"), params=params, timeout=30)
    assert [i["id"] for i in found.json()["incidents"]] == ["hit-november", "hit-open-since-october"]
    bad = requests.get(api.url("/api/incidents"), params={"to": "soon"}, timeout=30)
    assert bad.status_code == 400 and bad.json()["error"].startswith("to: expected an ISO-8601 time")


def test_the_documented_examples_run(store_path: Path) -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "on-call.md").read_text(encoding="utf-8")
    examples = [line.split("|")[0].split() for line in doc.splitlines()
                if line.startswith("oximeter incidents list")]
    assert len(examples) == 6
    for argv in examples:
        out = run_main("incidents", "--store", str(store_path), *argv[2:])
        assert out.returncode == 0, (argv, out.stderr)
