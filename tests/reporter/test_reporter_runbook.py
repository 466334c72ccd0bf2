"""Chat messages link the runbook under ``reporter.runbook_url`` when it is configured."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from relay_harness import sample_incident

from analyzer.incidents.lifecycle import Change
from analyzer.incidents.store import IncidentStore
from oximeter.store import connect
from reporter.am_payload import Alert, Payload
from reporter.outbox import Outbox
from reporter.relay import Relay
from reporter.render import render_change
from reporter.settings import ReporterSettings

NOW = datetime(2025, 11, 30, 12, 0, tzinfo=UTC)
BASE = "https://git.example.com/oximeter/blob/main/docs/runbook.md"


@pytest.mark.parametrize(("base", "expected"), [(None, "docs/runbook.md#thermal_throttle"),
                                                (BASE, f"{BASE}#thermal_throttle")])
def test_incident_message_links_the_rule_section(base: str | None, expected: str) -> None:
    incident = sample_incident(NOW)
    assert incident.runbook == "docs/runbook.md#thermal_throttle"
    message = render_change(Change(incident.id, "opened", 1, NOW, "warning", "opened"), incident,
                            ReporterSettings(runbook_url=base))
    assert [s.body for s in message.sections if s.title == "Runbook"] == [expected]


@pytest.mark.parametrize(("base", "expected"), [(None, "docs/runbook.md#gputemperaturehigh"),
                                                (BASE, f"{BASE}#gputemperaturehigh")])
def test_alert_message_links_the_alert_section(tmp_path: Path, base: str | None, expected: str) -> None:
    conn = connect(tmp_path / "s.db")
    relay = Relay(IncidentStore(conn), Outbox(conn), ReporterSettings(runbook_url=base), None)
    alert = Alert(fingerprint="f", status="firing", labels={"alertname": "GpuTemperatureHigh"},
                  annotations={"runbook_url": "docs/runbook.md#gputemperaturehigh"},
                  starts_at="2025-11-30T12:00:00Z", ends_at="", generator_url="")
    payload = Payload(group_key="g", status="firing", group_labels={}, common_labels={}, external_url="",
                      alerts=(alert,))
    message = relay.render(payload, [alert], "k")
    assert f"runbook: {expected}" in message.sections[0].body
