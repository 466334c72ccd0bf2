"""The incident pages over real HTTP, as a browser without JavaScript uses them: the list and its
filter form, one incident with its charts and timeline, and the forms that act (write token)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from api_server import ApiServer
from incident_cases import at, ev
from pydantic import SecretStr

from analyzer.diagnosis.topology import Topology
from analyzer.incidents.lifecycle import IncidentSettings, IncidentTracker, findings
from analyzer.incidents.store import IncidentStore
from analyzer.service.api import build_app
from oximeter.store import connect

WRITE, READ = "page-write-token", "page-read-token"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[IncidentStore]:
    s = IncidentStore(connect(tmp_path / "s.db"))
    tracker = IncidentTracker(IncidentSettings())
    xid = ev("xid_paging", 1, 0, node="n2", gpu="3", xid="79")
    temp = ev("gpu_temperature", 91, 70, node="n2", gpu="3")
    changes, touched = tracker.step(findings([xid, temp], Topology(), now=at(2)), at(2))
    s.save(touched, changes)
    yield s
    s.conn.close()


def serve(store: IncidentStore, write: str | None = WRITE) -> ApiServer:
    return ApiServer(build_app(store, None if write is None else SecretStr(write), clock=lambda: at(5)))


@pytest.fixture
def page(store: IncidentStore) -> Iterator[ApiServer]:
    server = serve(store)
    yield server
    server.stop()


def _id(store: IncidentStore) -> str:
    (row,) = store.conn.execute("SELECT id FROM incidents").fetchall()
    return str(row["id"])


def test_the_list_links_each_incident_and_filters_with_a_plain_form(page: ApiServer,
                                                                    store: IncidentStore) -> None:
    inc = _id(store)
    listed = requests.get(page.url("/incidents"), params={"since": "30d"}, timeout=30)
    assert listed.headers["Content-Type"].startswith("text/html")
    assert f"<a href='/incidents/{inc}'>{inc}</a>" in listed.text
    assert "<form method='get' action='/incidents'>" in listed.text
    empty = requests.get(page.url("/incidents"), params={"node": "n9", "since": "30d"}, timeout=30)
    assert "No incidents." in empty.text
    # The daily digest links to its day this way.
    day = requests.get(page.url("/incidents"), timeout=30,
                       params={"from": "2026-03-02T00:00:00Z", "to": "2026-03-03T00:00:00Z"})
    assert f"<a href='/incidents/{inc}'>" in day.text
    bad = requests.get(page.url("/incidents"), params={"severity": "page"}, timeout=30)
    assert bad.status_code == 400 and "severity: expected one of info, warning, critical" in bad.text


def test_an_incident_page_shows_charts_timeline_and_forms(page: ApiServer, store: IncidentStore) -> None:
    inc = _id(store)
    shown = requests.get(page.url(f"/incidents/{inc}"), timeout=30)
    assert shown.status_code == 200
    html = shown.text
    assert html.count("<svg") == 2 and "aria-label='evidence against baseline'" in html
    assert "baseline band: 1/2× to 2×" in html and "opened 10:02" in html
    assert "<table id='timeline'><tr><td>2026-03-02T10:02:00Z</td><td>opened</td>" in html
    for verb in ("ack", "silence", "resolve"):
        assert f"<form class='act' method='post' action='/incidents/{inc}/{verb}'>" in html
    assert "<script" not in html
    assert requests.get(page.url("/incidents/inc-nope"), timeout=30).status_code == 404


def test_acting_from_the_page_needs_the_write_token_and_shows_in_the_api(page: ApiServer,
                                                                         store: IncidentStore) -> None:
    inc = _id(store)
    url = page.url(f"/incidents/{inc}/ack")
    wrong = requests.post(url, data={"by": "grace", "note": "on it", "token": "guess"}, timeout=30)
    assert wrong.status_code == 401 and store.annotations_of(inc)["acks"] == []
    done = requests.post(url, data={"by": "grace", "note": "on it", "token": WRITE}, timeout=30,
                         allow_redirects=False)
    assert (done.status_code, done.headers["Location"]) == (303, f"/incidents/{inc}")
    api = requests.get(page.url(f"/api/incidents/{inc}"), timeout=30).json()
    assert api["acks"] == [{"at": "2026-03-02T10:05:00Z", "by": "grace", "note": "on it"}]
    assert "<td>acknowledged</td><td>by grace: on it</td>" in requests.get(page.url(f"/incidents/{inc}"),
                                                                         timeout=30).text
    silenced = requests.post(page.url(f"/incidents/{inc}/silence"),
                             data={"by": "grace", "for": "4h", "token": WRITE}, timeout=30)
    assert silenced.ok and store.annotations_of(inc)["silences"][0]["until"] == "2026-03-02T14:05:00Z"
    resolved = requests.post(page.url(f"/incidents/{inc}/resolve"), data={"by": "grace", "token": WRITE},
                             timeout=30)
    assert resolved.ok and "<td>resolve_requested</td><td>by grace</td>" in resolved.text


def test_without_a_write_token_the_forms_are_refused(store: IncidentStore) -> None:
    server = serve(store, write=None)
    try:
        refused = requests.post(server.url(f"/incidents/{_id(store)}/ack"), data={"by": "a", "token": ""},
                                timeout=30)
        assert refused.status_code == 403 and "OXIMETER_API_TOKEN is not set" in refused.text
    finally:
        server.stop()


def test_a_read_token_guards_the_pages_but_not_with_the_write_token(store: IncidentStore,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OXIMETER_PAGE_TOKEN", READ)
    server = serve(store)
    try:
        asked = requests.get(server.url("/incidents"), timeout=30)
        assert asked.status_code == 401 and asked.headers["WWW-Authenticate"].startswith("Basic")
        assert requests.get(server.url("/incidents"), auth=("me", WRITE), timeout=30).status_code == 401
        assert requests.get(server.url("/incidents"), auth=("me", READ), timeout=30).status_code == 200
    finally:
        server.stop()
