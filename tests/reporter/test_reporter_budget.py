"""Alerts that belong to an open incident become its timeline, not messages; an incident's next
message lists what its timeline gained since the last one."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pydantic import SecretStr
from relay_harness import sample_incident

from analyzer.incidents.lifecycle import Change, TimelineEntry
from analyzer.incidents.store import IncidentStore
from oximeter.store import connect
from reporter.channels import CHANNELS
from reporter.outbox import Outbox, OutboxPolicy
from reporter.relay import Payload, Relay
from reporter.render import render_change
from reporter.settings import ReporterSettings

NOW = datetime(2025, 11, 30, 12, 10, tzinfo=UTC)


def _relay(tmp_path: Path) -> tuple[Relay, IncidentStore, Outbox]:
    conn = connect(tmp_path / "oximeter.db")
    store = IncidentStore(conn)
    channel = CHANNELS["webhook"]("chat", SecretStr("http://127.0.0.1:9/hook"), SecretStr("s"))
    outbox = Outbox(conn, {"chat": channel}, OutboxPolicy())
    return Relay(store, outbox, ReporterSettings(), SecretStr("t"), clock=NOW.timestamp), store, outbox


def _payload(*alerts: dict[str, Any]) -> Payload:
    return Payload.parse({"version": "4", "groupKey": "g", "status": "firing", "groupLabels": {},
                          "commonLabels": {}, "alerts": list(alerts)})


def _alert(name: str, status: str = "firing", **labels: str) -> dict[str, Any]:
    return {"status": status, "labels": {"alertname": name, **labels}, "annotations": {},
            "startsAt": "2025-11-30T12:00:00Z", "fingerprint": f"fp-{name}"}


def test_an_alert_of_another_layer_on_the_incidents_node_is_its_evidence(tmp_path: Path) -> None:
    relay, store, outbox = _relay(tmp_path)
    store.save([sample_incident(NOW)])  # infrastructure, n1
    queue = _alert("GatewayQueueWaitHigh", node="n1", service="chat", layer="scheduling")
    ttft = _alert("TtftAboveYesterday", service="chat", layer="ingress")
    elsewhere = _alert("GatewayQueueBacklog", node="n2", service="chat", layer="scheduling")
    outcome = relay.receive(_payload(queue, ttft, elsewhere))
    assert sorted(f for f, _ in outcome.evidence) == ["fp-GatewayQueueWaitHigh", "fp-TtftAboveYesterday"]
    assert outcome.forwarded == ("fp-GatewayQueueBacklog",)
    assert len(outbox.rows()) == 1


def test_the_resolve_of_an_attached_alert_stays_with_its_incident(tmp_path: Path) -> None:
    relay, store, outbox = _relay(tmp_path)
    incident = sample_incident(NOW)
    store.save([incident])
    firing = _alert("GpuTemperatureHigh", node="n1", gpu="2", layer="infrastructure")
    relay.receive(_payload(firing))
    store.save([replace(incident, state="resolved", resolved_at=NOW)])
    outcome = relay.receive(_payload({**firing, "status": "resolved"}))
    assert outcome.evidence == (("fp-GpuTemperatureHigh", incident.id),) and outcome.forwarded == ()
    assert outbox.rows() == []


def test_the_next_message_lists_what_was_folded_since_the_last() -> None:
    incident = sample_incident(NOW)
    t = NOW - timedelta(minutes=5)
    timeline = (
        TimelineEntry(t, "opened", "opened: GPU hot", notified=True),
        TimelineEntry(t + timedelta(minutes=1), "root_cause_changed", "root cause now x", notified=True),
        TimelineEntry(t + timedelta(minutes=2), "alert", "Alertmanager GatewayQueueWaitHigh firing"),
        TimelineEntry(t + timedelta(minutes=3), "root_cause_changed", "root cause now y"),
        TimelineEntry(t + timedelta(minutes=4), "resolved", "resolved: quiet", notified=True),
    )
    incident = replace(incident, timeline=timeline, seq=3)
    resolved = render_change(Change(incident.id, "resolved", 3, NOW, "warning", "resolved: quiet"), incident,
                             ReporterSettings())
    (section,) = [s for s in resolved.sections if s.title == "Since the last message"]
    assert section.body.splitlines() == ["12:07:00Z alert: Alertmanager GatewayQueueWaitHigh firing",
                                         "12:08:00Z root_cause_changed: root cause now y"]
    changed = render_change(Change(incident.id, "root_cause_changed", 2, NOW, "warning", "x"), incident,
                            ReporterSettings())
    assert "Since the last message" not in [s.title for s in changed.sections]
