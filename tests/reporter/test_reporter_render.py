"""Incident messages, routing, the notifier and the daemon wiring (no network but the chat receiver)."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

import pytest
from chat_receiver import ChatReceiver
from pydantic import SecretStr
from relay_harness import sample_incident

from analyzer.incidents.lifecycle import Change
from analyzer.incidents.store import IncidentStore
from analyzer.service.api import build_app
from oximeter.store import connect
from reporter.routing import Router
from reporter.settings import ChannelSettings, ReporterSettings, RouteSettings
from reporter.wiring import build_reporting

NOW = datetime(2025, 11, 30, 12, 0, tzinfo=UTC)
ROUTES = [
    RouteSettings(match={"severity": "critical", "layer": "infrastructure"}, channels=["pager", "ops"]),
    RouteSettings(match={"service": ["chat", "search"]}, channels=["chat-team"]),
    RouteSettings(match={"layer": "ingress"}, channels=["edge", "missing"]),
]
ALL = ("pager", "ops", "chat-team", "edge", "digest")

ROUTING: list[tuple[str, str, tuple[str, ...], list[str]]] = [
    ("critical", "infrastructure", (), ["pager", "ops"]),
    ("critical", "infrastructure", ("chat",), ["pager", "ops", "chat-team"]),
    ("warning", "infrastructure", (), list(ALL)),  # nothing matches: every channel
    ("warning", "engine", ("search", "other"), ["chat-team"]),  # any one service matches
    ("info", "ingress", (), ["edge"]),  # unknown channels are dropped
    ("critical", "", (), list(ALL)),
]


@pytest.mark.parametrize(("severity", "layer", "services", "expected"), ROUTING)
def test_routing_table(severity: str, layer: str, services: tuple[str, ...], expected: list[str]) -> None:
    router = Router.from_settings(ROUTES, ALL)
    assert router.channels_for(severity=severity, layer=layer, services=services) == expected
    assert router.unknown_channels() == ["missing"]


def _settings(**kwargs: object) -> ReporterSettings:
    return ReporterSettings(grafana_url="https://grafana.example/", api_url="http://analyzer:9471", **kwargs)


@pytest.mark.parametrize(("kind", "prefix"), [("opened", "OPENED"), ("severity_up", "SEVERITY UP"),
                                              ("root_cause_changed", "ROOT CAUSE CHANGED"),
                                              ("resolved", "RESOLVED")])
def test_incident_message_has_diagnosis_evidence_and_links(kind: str, prefix: str) -> None:
    from reporter.render import render_change

    incident = sample_incident(NOW)
    change = Change(incident.id, kind, 3, NOW, "critical", f"{kind} text")  # type: ignore[arg-type]
    message = render_change(change, incident, _settings(), now=NOW)
    assert message.title == f"{prefix}: {incident.title}"
    assert (message.severity, message.idempotency_key, message.simulation) == (
        "critical", f"{incident.id}:{kind}:3", False)
    assert dict(message.fields)["Root cause"] == "gpu_temperature on gpu=2,node=n1"
    sections = {s.title: s for s in message.sections}
    assert sections["Diagnosis"].body == f"{incident.sentence}\n{kind} text"
    assert sections["Evidence against baseline"].table[1] == (
        "cause", "gpu_temperature", "gpu=2,node=n1", "91", "62", "1.468", f"{incident.first_onset:%H:%M:%S}")
    assert sections["Runbook"].body == "docs/runbook.md#thermal_throttle"
    dashboard, api = message.links
    parts = urlsplit(dashboard.url)
    assert (parts.netloc, parts.path) == ("grafana.example", "/d/oximeter-gpu-fleet")
    assert parse_qsl(parts.query) == [
        ("from", str(int((incident.first_onset - timedelta(minutes=15)).timestamp() * 1000))),
        ("to", str(int((NOW + timedelta(minutes=15)).timestamp() * 1000))),
        ("var-node", "n1"), ("var-service", "chat")]
    assert api.url == f"http://analyzer:9471/incidents/{incident.id}"


@pytest.mark.parametrize(("labelled", "configured", "marked"),
                         [(False, False, False), (True, False, True), (False, True, True)])
def test_simulation_marker(labelled: bool, configured: bool, marked: bool) -> None:
    from reporter.render import render_change

    incident = sample_incident(NOW, simulated=labelled)
    message = render_change(Change(incident.id, "opened", 1, NOW, "warning", "x"), incident,
                            _settings(simulated=configured))
    assert message.simulation is marked
    assert message.heading.startswith("[SIMULATION] ") is marked


def test_wiring_notifier_routes_and_delivers_once(tmp_path: Path, receiver: ChatReceiver,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHAT_URL", receiver.url("webhook"))
    monkeypatch.setenv("CHAT_SECRET", receiver.secrets["webhook"] or "")
    monkeypatch.setenv("WECOM_URL", receiver.url("wecom"))
    settings = _settings(
        channels={"chat": ChannelSettings(type="webhook", url_env="CHAT_URL", secret_env="CHAT_SECRET"),
                  "wecom": ChannelSettings(type="wecom", url_env="WECOM_URL")},
        routes=[RouteSettings(match={"layer": "infrastructure"}, channels=["chat"])])
    store = IncidentStore(connect(tmp_path / "oximeter.db"))
    reporting = build_reporting(store, settings, SecretStr("t"))
    incident = sample_incident(NOW)
    change = Change(incident.id, "opened", 1, NOW, "warning", "opened")
    for _ in range(2):  # a daemon that crashed before marking the change emitted flushes it again
        reporting.notifier.notify(change, incident)
    reporting.notifier.notice("analyzer:source_down:1", "analyzer cannot see")
    reporting.outbox.deliver_due(time.time() + 1)
    assert receiver.accepted_keys() == {change.key: 1, "analyzer:source_down:1": 1}
    assert [r.data["msgtype"] for r in receiver.accepted("wecom")] == ["markdown"]  # the notice only
    app = build_app(store, SecretStr("t"))
    reporting.mount(app)
    assert "/api/alertmanager" in {r.resource.canonical for r in app.router.routes() if r.resource}
    store.conn.close()


@pytest.mark.parametrize(("section", "error"), [
    ({"routes": [{"match": {"severity": "critical"}, "channels": ["pager"]}]},
     "reporter: Value error, routes/digest name unconfigured channel(s): pager"),
    ({"digest": {"channels": ["daily"]}}, "routes/digest name unconfigured channel(s): daily"),
    ({"digest": {"timezone": "Mars/Base"}}, "reporter.digest.timezone: Value error, unknown time zone"),
    ({"digest": {"time": "8am"}}, "reporter.digest.time: String should match pattern"),
    ({"routes": [{"match": {"team": "x"}, "channels": ["a"]}]}, "reporter.routes.0.match.team.[key]"),
])
def test_reporter_config_errors_name_the_key(section: dict[str, object], error: str) -> None:
    from oximeter.config import parse_config
    from oximeter.errors import ConfigError

    with pytest.raises(ConfigError) as caught:
        parse_config({"reporter": section}, "oximeter.yaml")
    assert error in str(caught.value)
    assert "oximeter.yaml" in str(caught.value)


@pytest.mark.parametrize("provisional", [False, True])
def test_a_message_says_when_a_member_had_no_seasonal_baseline_yet(provisional: bool) -> None:
    from dataclasses import replace

    from analyzer.incidents.model import Incident
    from reporter.render import render_change

    incident = sample_incident(NOW)
    cause, impact = incident.evidence
    incident = replace(incident, evidence=(cause, replace(impact, provisional=provisional)))
    assert Incident.from_dict(incident.to_dict()) == incident  # kept by the store and the API
    message = render_change(Change(incident.id, "opened", 1, NOW, "warning", "x"), incident, _settings())
    sections = {s.title: s for s in message.sections}
    assert sections["Evidence against baseline"].table[2][4] == ("0.12 (recent)" if provisional else "0.12")
    if provisional:
        assert "queue_wait_p99" in sections["Baseline"].body
        assert "under a day of history" in sections["Baseline"].body
    else:
        assert "Baseline" not in sections
