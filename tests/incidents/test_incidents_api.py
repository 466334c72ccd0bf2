"""The analyzer API on a real aiohttp server on a free port: every filter, auth, malformed input."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
import requests
from api_server import ApiServer
from incident_cases import at, ev, gpu
from pydantic import SecretStr

from analyzer.diagnosis.topology import Topology, TopologySettings
from analyzer.incidents.lifecycle import IncidentSettings, IncidentTracker, findings
from analyzer.incidents.store import IncidentStore
from analyzer.service.api import build_app
from oximeter.store import connect

TOKEN = "s3cret-token"
NOW = at(20)
TOPO = Topology.from_settings(TopologySettings(services={"chat": ["node-0"], "embed": ["node-1"]}))


def fill(store: IncidentStore) -> None:
    settings = IncidentSettings(resolve_after_s=300)
    tracker = IncidentTracker(settings)
    q = ev("queue_wait_p99", 4.8, 0.787, node="node-0", service="chat")
    xid = ev("xid_paging", 1, 0, onset=2, node="node-1", gpu="3", xid="79")
    for minute, events in ((3, [q, xid]), (10, [replace(q, cleared_at=at(4)), xid])):
        changes, touched = tracker.step(findings(events, TOPO, now=at(minute), settings=settings,
                                                 snapshot={"gpu_utilization_p95": {gpu(): 0.3}}), at(minute))
        store.save(touched, changes)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> IncidentStore:
    s = IncidentStore(connect(tmp_path_factory.mktemp("api") / "oximeter.db"))
    fill(s)
    return s


@pytest.fixture(scope="module")
def api(store: IncidentStore) -> Iterator[ApiServer]:
    server = ApiServer(build_app(store, SecretStr(TOKEN), clock=lambda: NOW))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def api_without_token(store: IncidentStore) -> Iterator[ApiServer]:
    server = ApiServer(build_app(store, None, clock=lambda: NOW))
    yield server
    server.stop()


def get(server: ApiServer, path: str, **params: str) -> requests.Response:
    return requests.get(server.url(path), params=params, timeout=30)


def post(server: ApiServer, path: str, body: Any, token: str | None = TOKEN, raw: bytes | None = None
         ) -> requests.Response:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    if raw is not None:
        return requests.post(server.url(path), data=raw, headers=headers, timeout=30)
    return requests.post(server.url(path), json=body, headers=headers, timeout=30)


FILTERS = [
    ({}, ["xid_critical", "scheduling_bottleneck"]),
    ({"state": "open"}, ["xid_critical"]),
    ({"state": "resolved"}, ["scheduling_bottleneck"]),
    ({"layer": "scheduling"}, ["scheduling_bottleneck"]),
    ({"service": "embed"}, ["xid_critical"]),
    ({"node": "node-0"}, ["scheduling_bottleneck"]),
    ({"rule": "xid_critical"}, ["xid_critical"]),
    ({"since": "5m"}, ["xid_critical"]),
    ({"limit": "1"}, ["xid_critical"]),
    ({"state": "open", "layer": "scheduling"}, []),
]


@pytest.mark.parametrize(("params", "rules"), FILTERS, ids=[str(p) for p, _ in FILTERS])
def test_list_filters(api: ApiServer, params: dict[str, str], rules: list[str]) -> None:
    response = get(api, "/api/incidents", **params)
    assert response.status_code == 200
    assert [i["rule"] for i in response.json()["incidents"]] == rules


MALFORMED = [
    ({"since": "forever"}, "since: expected a duration such as 90s, 15m, 24h or 7d, got 'forever'"),
    ({"since": "999999999999999d"}, "since: '999999999999999d' is out of range (at most 100y)"),
    ({"state": "closed"}, "state: expected open or resolved, got 'closed'"),
    ({"layer": "x"}, "layer: expected one of infrastructure, platform, engine, dependency, scheduling, "
                     "ingress, got 'x'"),
    ({"rule": "x"}, "rule: unknown rule 'x'"),
    ({"limit": "many"}, "limit: expected an integer in 1..10000, got 'many'"),
    ({"limit": "9" * 23}, f"limit: expected an integer in 1..10000, got {'9' * 23}"),
    ({"nodes": "node-0"}, "unknown parameter(s): nodes"),
]


@pytest.mark.parametrize(("params", "reason"), MALFORMED, ids=[str(p) for p, _ in MALFORMED])
def test_malformed_filters_are_400_with_a_reason(api: ApiServer, params: dict[str, str], reason: str) -> None:
    response = get(api, "/api/incidents", **params)
    assert (response.status_code, response.json()) == (400, {"error": reason})


def _id(api: ApiServer, rule: str) -> str:
    return str(get(api, "/api/incidents", rule=rule).json()["incidents"][0]["id"])


def test_get_one(api: ApiServer) -> None:
    inc_id = _id(api, "scheduling_bottleneck")
    body = get(api, f"/api/incidents/{inc_id}").json()
    assert body["diagnosis"]["sentence"] == "queue_wait p99 4.8 s = 6.1 × baseline while GPU util 30 %"
    assert [n["kind"] for n in body["notifications"]] == ["opened", "resolved"]
    missing = get(api, "/api/incidents/inc-nope")
    assert (missing.status_code, missing.json()) == (404, {"error": "no incident 'inc-nope'"})


WRITES = [
    ("/api/incidents/{id}/ack", {"by": "alice", "note": "on it"}),
    ("/api/incidents/{id}/silence", {"by": "alice", "for": "2h"}),
    ("/api/changes", {"kind": "deploy", "description": "engine 0.6.3", "labels": {"node": "node-0"}}),
]


@pytest.mark.parametrize(("path", "body"), WRITES, ids=[w[0] for w in WRITES])
def test_writes_refuse_without_the_right_token(api: ApiServer, api_without_token: ApiServer, path: str,
                                               body: dict[str, Any]) -> None:
    path = path.format(id=_id(api, "xid_critical"))
    for token in (None, "wrong", ""):
        response = post(api, path, body, token=token)
        assert (response.status_code, response.json()) == (401, {"error": "missing or wrong bearer token"})
        assert response.headers["WWW-Authenticate"] == "Bearer"
    disabled = post(api_without_token, path, body)
    assert disabled.status_code == 403
    assert disabled.json() == {"error": "writes are disabled: OXIMETER_API_TOKEN is not set on the analyzer"}
    assert TOKEN not in disabled.text


def test_ack_and_silence(api: ApiServer, store: IncidentStore) -> None:
    inc_id = _id(api, "xid_critical")
    assert post(api, f"/api/incidents/{inc_id}/ack", {"by": "alice", "note": "on it"}).json() == {"ok": True}
    silenced = post(api, f"/api/incidents/{inc_id}/silence", {"by": "bob", "for": "2h"})
    assert silenced.json() == {"ok": True, "until": "2026-03-02T12:20:00Z"}
    assert store.silenced(inc_id, at(139)) and not store.silenced(inc_id, at(141))
    body = get(api, f"/api/incidents/{inc_id}").json()
    assert body["acks"] == [{"at": "2026-03-02T10:20:00Z", "by": "alice", "note": "on it"}]
    assert post(api, "/api/incidents/inc-nope/ack", {"by": "a"}).status_code == 404


BAD_BODIES = [
    ("/api/incidents/{id}/ack", None, b"not json",
     "body: malformed JSON (Expecting value: line 1 column 1 (char 0))"),
    ("/api/incidents/{id}/ack", [1, 2], None, "body: expected a JSON object"),
    ("/api/incidents/{id}/ack", {"note": "x"}, None, "by: expected a non-empty string"),
    ("/api/incidents/{id}/silence", {"by": "a", "for": "ever"}, None,
     "for: expected a duration such as 90s, 15m, 24h or 7d, got 'ever'"),
    ("/api/incidents/{id}/silence", {"by": "a", "for": "99999999999999999999999d"}, None,
     "for: '99999999999999999999999d' is out of range (at most 100y)"),
    ("/api/incidents/{id}/silence", {"by": "a", "until": "9999-12-31T23:59:59Z"}, None,
     "until: '9999-12-31T23:59:59Z' is out of range (1970-01-01 to 2100-01-01)"),
    ("/api/incidents/{id}/silence", {"by": "a", "until": 7}, None,
     "until: expected an ISO-8601 time, got '7'"),
    ("/api/incidents/{id}/silence", {"by": "a", "until": "2026-03-02T09:00:00Z"}, None,
     "until: expected a future ISO-8601 time"),
    ("/api/incidents/{id}/silence", {"by": "a", "for": "60d"}, None, "silence: at most 30 days"),
    ("/api/changes", {"kind": "deploy"}, None, "description: expected a non-empty string"),
    ("/api/changes", {"kind": "deploy", "description": "x", "labels": {"node": 3}}, None,
     "labels: expected an object of string values"),
    ("/api/changes", {"kind": "deploy", "description": "x", "at": 5}, None,
     "at: expected an ISO-8601 time, got '5'"),
    ("/api/changes", {"kind": "deploy", "description": "x", "at": "-1"}, None,
     "at: expected an ISO-8601 time, got '-1'"),
]


@pytest.mark.parametrize(("path", "body", "raw", "reason"), BAD_BODIES, ids=[b[3] for b in BAD_BODIES])
def test_malformed_bodies_are_400(api: ApiServer, path: str, body: Any, raw: bytes | None,
                                  reason: str) -> None:
    response = post(api, path.format(id=_id(api, "xid_critical")), body, raw=raw)
    assert (response.status_code, response.json()) == (400, {"error": reason})


def test_record_change(api: ApiServer, store: IncidentStore) -> None:
    response = post(api, "/api/changes", {"kind": "deploy", "description": "engine 0.6.3",
                                          "labels": {"node": "node-0"}, "at": "2026-03-02T10:01:00Z"})
    assert response.status_code == 201
    body = response.json()
    assert body == {"id": body["id"], "at": "2026-03-02T10:01:00Z", "kind": "deploy",
                    "description": "engine 0.6.3", "labels": {"node": "node-0"}, "source": "api"}
    assert [c.description for c in store.change_events(at(1), at(1))] == ["engine 0.6.3"]


def test_annotations_for_grafana(api: ApiServer) -> None:
    ms = int(at(0).timestamp() * 1000)
    found = get(api, "/api/annotations", **{"from": str(ms), "to": str(ms + 3_600_000)}).json()
    by_rule = {a["tags"].split(",")[1]: a for a in found}
    assert sorted(by_rule) == ["scheduling_bottleneck", "xid_critical"]
    sched = by_rule["scheduling_bottleneck"]
    assert (sched["time"], sched["timeEnd"], sched["isRegion"]) == (ms, ms + 10 * 60_000, True)
    # One comma-separated string: the tags column Grafana's Infinity datasource reads.
    assert sched["tags"] == "scheduling,scheduling_bottleneck,critical,resolved,chat,node-0"
    only = get(api, "/api/annotations", **{"from": str(ms), "layer": "infrastructure"}).json()
    assert [a["tags"].split(",")[1] for a in only] == ["xid_critical"]
    later = get(api, "/api/annotations", **{"from": str(ms + 15 * 60_000)}).json()
    assert [a["tags"].split(",")[1] for a in later] == ["xid_critical"]
    bad = get(api, "/api/annotations", **{"from": "yesterday"})
    assert bad.status_code == 400
    assert bad.json() == {"error": "from: expected epoch milliseconds (0..253402300799999), got 'yesterday'"}
    huge = get(api, "/api/annotations", **{"from": "99999999999999999999"})
    assert huge.status_code == 400
    assert huge.json() == {"error": "from: expected epoch milliseconds (0..253402300799999), "
                                    "got '99999999999999999999'"}


def test_openapi(api: ApiServer) -> None:
    doc = get(api, "/openapi.json").json()
    assert doc["openapi"] == "3.0.3"
    assert sorted(doc["paths"]) == [
        "/api/annotations", "/api/changes", "/api/incidents", "/api/incidents/{id}",
        "/api/incidents/{id}/ack", "/api/incidents/{id}/resolve", "/api/incidents/{id}/silence",
        "/api/maintenance", "/openapi.json"]
