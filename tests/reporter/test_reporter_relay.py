"""The Alertmanager relay: payload validation, auth, store failure, and a real Alertmanager end to end."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import requests
from chat_receiver import ChatReceiver
from pg_server import StoreSpace
from prometheus_client import CollectorRegistry
from pydantic import SecretStr
from relay_harness import ThreadedApp, sample_incident

from analyzer.incidents.lifecycle import Change
from analyzer.incidents.store import IncidentStore
from analyzer.service.api import build_app
from oximeter.store import connect
from reporter.channels import CHANNELS
from reporter.outbox import Outbox, OutboxPolicy
from reporter.relay import PATH, Payload, Relay, mount
from reporter.render import OutboxNotifier
from reporter.settings import ReporterSettings
from reporter.worker import DeliveryWorker
from stack.ports import start_reserved
from stack.procs import ManagedProcess, http_ok

TOKEN = "relay-token-5f1c"
ALERTMANAGER = "/usr/bin/prometheus-alertmanager"


@dataclass
class Stack:
    """API + relay + outbox delivering to the chat receiver's generic webhook."""

    api: ThreadedApp
    relay: Relay
    store: IncidentStore
    outbox: Outbox
    receiver: ChatReceiver


@pytest.fixture
def stack(stores: StoreSpace, receiver: ChatReceiver) -> Iterator[Stack]:
    conn = connect(stores / "oximeter.db")
    store = IncidentStore(conn)
    channel = CHANNELS["webhook"]("chat", SecretStr(receiver.url("webhook")),
                                  SecretStr(receiver.secrets["webhook"] or ""))
    outbox = Outbox(conn, {"chat": channel}, OutboxPolicy(retry_base_s=0.2))
    relay = Relay(store, outbox, ReporterSettings(), SecretStr(TOKEN))
    app = build_app(store, SecretStr(TOKEN))
    mount(app, relay)
    api = ThreadedApp(app).start()
    worker = DeliveryWorker(outbox, interval_s=0.1).start()
    yield Stack(api, relay, store, outbox, receiver)
    worker.stop()
    api.stop()
    conn.close()


def _alert(name: str, status: str = "firing", **labels: str) -> dict[str, Any]:
    return {"status": status, "labels": {"alertname": name, **labels}, "annotations": {"summary": name},
            "startsAt": "2025-11-30T12:00:00Z", "endsAt": "0001-01-01T00:00:00Z",
            "generatorURL": "http://prom/graph", "fingerprint": f"fp-{name}", "extra": "ignored"}


def _payload(*alerts: dict[str, Any]) -> dict[str, Any]:
    return {"version": "4", "groupKey": "{}:{alertname=\"x\"}", "truncatedAlerts": 0, "status": "firing",
            "receiver": "oximeter", "groupLabels": {"alertname": "x"}, "commonLabels": {},
            "commonAnnotations": {}, "externalURL": "http://am", "alerts": list(alerts), "unknown": 1}


def _post(stack: Stack, body: Any, token: str | None = TOKEN) -> requests.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return requests.post(f"{stack.api.url}{PATH}", data=data, headers=headers, timeout=10)


BAD_PAYLOADS: list[tuple[str, Any, str]] = [
    ("not json", b"{nope", "body: malformed JSON"),
    ("a list", [], "body: expected a JSON object"),
    ("version 3", {**_payload(), "version": "3"}, "version: expected \"4\""),
    ("alerts missing", {"version": "4"}, "alerts: expected a list"),
    ("bad status", _payload({**_alert("a"), "status": "pending"}), "alerts[0].status"),
    ("no fingerprint", _payload({**_alert("a"), "fingerprint": ""}), "alerts[0].fingerprint"),
    ("label not a string", _payload({**_alert("a"), "labels": {"alertname": 3}}), "alerts[0].labels"),
    ("bad startsAt", _payload({**_alert("a"), "startsAt": "yesterday"}), "alerts[0].startsAt"),
]


@pytest.mark.parametrize(("case", "body", "reason"), BAD_PAYLOADS, ids=[c[0] for c in BAD_PAYLOADS])
def test_malformed_payload_is_400_with_reason(stack: Stack, case: str, body: Any, reason: str) -> None:
    reply = _post(stack, body)
    assert reply.status_code == 400
    assert reason in reply.json()["error"]
    assert stack.relay.records() == []


@pytest.mark.parametrize(("token", "status"), [(None, 401), ("wrong", 401)])
def test_relay_needs_the_bearer_token(stack: Stack, token: str | None, status: int) -> None:
    assert _post(stack, _payload(_alert("a")), token).status_code == status


def test_duplicates_forward_once_and_watchdog_is_a_heartbeat(stack: Stack) -> None:
    body = _payload(_alert("QueueBackedUp", node="n2", layer="scheduling"), _alert("Watchdog"))
    first, second = _post(stack, body).json(), _post(stack, body).json()
    assert (len(first["forwarded"]), first["heartbeats"], first["duplicates"]) == (1, 1, 0)
    assert (second["forwarded"], second["duplicates"], second["message_key"]) == ([], 2, None)
    assert [r["disposition"] for r in stack.relay.records()] == ["forwarded", "heartbeat"]
    assert len(stack.outbox.rows()) == 1


def test_a_large_group_passes_the_api_body_limit(stack: Stack) -> None:
    alerts = [{**_alert(f"a{i}", node="n2", layer="scheduling", padding="x" * 200), "fingerprint": f"fp{i}"}
              for i in range(400)]  # ~150 KB, past the API's 64 KiB client_max_size
    reply = _post(stack, _payload(*alerts))
    assert reply.status_code == 200, reply.text
    assert len(reply.json()["forwarded"]) == 400
    assert len(stack.outbox.rows()) == 1  # one message for the group, listing 20 and counting the rest
    group = Payload.parse(_payload(*alerts))
    message = stack.relay.render(group, group.alerts, "k")
    assert len(message.sections) == 21 and message.sections[-1].body == "and 380 more alert(s) in this group"
    huge = b'{"version": "4", "alerts": [' + b" " * (5 * 1024 * 1024) + b"]}"
    assert _post(stack, huge).status_code == 413


def test_store_failure_is_503_so_alertmanager_retries(stack: Stack, stores: StoreSpace) -> None:
    broken = connect(stores / "other.db")
    relay = Relay(IncidentStore(broken), stack.outbox, ReporterSettings(), SecretStr(TOKEN))
    broken.close()  # every statement now raises a sqlite3.Error (PostgreSQL's too, as the store's)
    app = build_app(stack.store, SecretStr(TOKEN))
    mount(app, relay)
    api = ThreadedApp(app).start()
    try:
        reply = requests.post(f"{api.url}{PATH}", json=_payload(_alert("a")),
                              headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10)
    finally:
        api.stop()
    assert reply.status_code == 503
    assert reply.json() == {"error": "store error; retry"}


def _wait(predicate: Callable[[], object], what: str, timeout_s: float = 30.0) -> None:
    from stack.procs import wait_until

    wait_until(predicate, timeout_s, interval_s=0.1, what=what)


def test_real_alertmanager_firing_and_resolved(stack: Stack, tmp_path: Path,
                                               start_process: Callable[..., ManagedProcess]) -> None:
    now = datetime.now(UTC)
    incident = sample_incident(now)
    stack.store.save([incident])
    # The incident announced itself once (as the daemon's notifier would).
    notifier = OutboxNotifier(stack.outbox, ReporterSettings())
    notifier.notify(Change(incident.id, "opened", 1, now, "warning", "opened"), incident)
    _wait(lambda: len(stack.receiver.accepted("webhook")) == 1, "the incident's opened message")

    token_file = tmp_path / "am-token"
    token_file.write_text(TOKEN)
    config = tmp_path / "alertmanager.yml"
    config.write_text(json.dumps({
        "route": {"receiver": "oximeter", "group_by": ["alertname", "node"], "group_wait": "1s",
                  "group_interval": "1s", "repeat_interval": "1h"},
        "receivers": [{"name": "oximeter", "webhook_configs": [{
            "url": f"{stack.api.url}{PATH}", "send_resolved": True,
            "http_config": {"authorization": {"type": "Bearer", "credentials_file": str(token_file)}}}]}],
    }))
    _, port = start_reserved(lambda port: start_process("alertmanager", [
        ALERTMANAGER, f"--config.file={config}", f"--storage.path={tmp_path / 'am-data'}",
        f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address="]),
        lambda port: http_ok(f"http://127.0.0.1:{port}/-/ready"), timeout_s=30)

    matching = {"alertname": "GpuTemperatureHigh", "node": "n1", "gpu": "2", "layer": "infrastructure",
                "severity": "warning"}
    other = {"alertname": "QueueBackedUp", "node": "n2", "service": "chat", "layer": "scheduling",
             "severity": "critical"}
    starts = (now - timedelta(minutes=2)).isoformat()

    def push(labels: dict[str, str], ends: datetime | None = None) -> None:
        alert: dict[str, Any] = {"labels": labels, "annotations": {"summary": labels["alertname"]},
                                 "startsAt": starts}
        if ends is not None:
            alert["endsAt"] = ends.isoformat()
        reply = requests.post(f"http://127.0.0.1:{port}/api/v2/alerts", json=[alert], timeout=10)
        assert reply.status_code == 200, reply.text

    push(matching)
    push(other)
    _wait(lambda: len(stack.relay.records()) == 2, "both firing alerts relayed")
    _wait(lambda: len(stack.receiver.accepted("webhook")) == 2, "the unmatched alert forwarded")
    resolved_at = datetime.now(UTC)
    push(matching, resolved_at)
    push(other, resolved_at)
    _wait(lambda: len(stack.relay.records()) == 4, "both resolved alerts relayed")
    _wait(lambda: len(stack.receiver.accepted("webhook")) == 3, "the unmatched resolve forwarded")

    records = {(r["alertname"], r["status"]): r for r in stack.relay.records()}
    assert {k: (r["disposition"], r["incident_id"]) for k, r in records.items()} == {
        ("GpuTemperatureHigh", "firing"): ("evidence", incident.id),
        ("GpuTemperatureHigh", "resolved"): ("evidence", incident.id),
        ("QueueBackedUp", "firing"): ("forwarded", None),
        ("QueueBackedUp", "resolved"): ("forwarded", None),
    }
    titles = [r.data["title"] for r in stack.receiver.accepted("webhook")]
    assert titles[0].startswith("OPENED: ")
    assert titles[1:] == ["[FIRING:1] QueueBackedUp (alertname=QueueBackedUp, node=n2)",
                          "[RESOLVED:1] QueueBackedUp (alertname=QueueBackedUp, node=n2)"]
    assert stack.receiver.problems == []
    # The matching alert is evidence the analyzer attaches to the incident (a change event)…
    events = stack.store.change_events(now - timedelta(hours=1), datetime.now(UTC) + timedelta(minutes=1))
    assert [(e.kind, e.source, dict(e.labels)) for e in events] == [
        ("alert", "alertmanager", {"incident": incident.id, "layer": "infrastructure", "node": "n1"})] * 2
    assert [e["status"] for e in stack.relay.evidence_of(incident.id)] == ["firing", "resolved"]
    # …and the incident got no second message.
    assert sum(1 for t in titles if "GpuTemperatureHigh" in t or "thermal_throttle" in t) == 1


def test_watchdog_absence_is_told_once_per_outage(stack: Stack) -> None:
    clock = [1000.0]
    registry = CollectorRegistry()
    relay = Relay(stack.store, stack.outbox, ReporterSettings(watchdog_timeout_s=600), SecretStr(TOKEN),
                  clock=lambda: clock[0], registry=registry)
    seen = "oximeter_relay_watchdog_last_seen_timestamp_seconds"
    assert (relay.check_watchdog(), registry.get_sample_value(seen)) == (False, 0.0)  # never seen: quiet
    watchdog = _payload({**_alert("Watchdog"), "fingerprint": "fp-wd"})
    relay.receive(Payload.parse(watchdog))
    clock[0] = 1500.0
    relay.receive(Payload.parse(watchdog))  # a repeat: a duplicate alert, but still a heartbeat
    assert registry.get_sample_value(seen) == 1500.0
    steps = []
    for now in (2100.0, 2101.0, 2500.0):
        clock[0] = now
        steps.append(relay.check_watchdog())
    assert steps == [False, True, False]
    (row,) = stack.outbox.rows()
    assert (row.idempotency_key, row.severity, row.title) == (
        "watchdog:lost:1500", "critical", "Alerting path broken: no Watchdog from Alertmanager")
    clock[0] = 3000.0
    relay.receive(Payload.parse(watchdog))  # back: the next outage is told again
    clock[0] = 3601.0
    assert relay.check_watchdog() is True
    assert [r.idempotency_key for r in stack.outbox.rows()] == ["watchdog:lost:1500", "watchdog:lost:3000"]
