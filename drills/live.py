"""Live drills: a scenario's faults injected into a running simulator through
``POST /admin/faults``, the analyzer's ``GET /api/incidents`` polled until every expected root
cause is named (or a deadline), scored like a replay, the faults removed afterwards.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from drills.score import DrillScore, expected_truths, parse_when, score, truth_matches
from oximeter.errors import OximeterError


@dataclass(frozen=True)
class LiveTarget:
    """A running stack: the simulator's admin API and the analyzer's API."""

    sim_url: str
    analyzer_url: str
    admin_token: str
    time_scale: float = 1.0
    timeout_s: float = 600.0
    quiet_s: float = 120.0
    poll_s: float = 2.0


def history_only_kinds(path: Path) -> list[str]:
    """The scenario's fault kinds that only ``oximeter sim history`` simulates."""
    from simulator.faults import FAULT_KINDS
    from simulator.scenario import load_scenario

    kinds = {f.kind for f in load_scenario(path).faults}
    return sorted(k for k in kinds if k in FAULT_KINDS and FAULT_KINDS[k].history_only)


def live_drill(path: Path, target: LiveTarget) -> DrillScore:
    """Inject the scenario's faults now (durations × time scale), watch the analyzer, score, clean up."""
    import requests

    from analyzer.incidents.lifecycle import NOTIFY_KINDS
    from analyzer.incidents.stability import message_budget
    from simulator.scenario import load_scenario

    sc = load_scenario(path)
    headers = {"Authorization": f"Bearer {target.admin_token}"}
    sim, api = target.sim_url.rstrip("/"), target.analyzer_url.rstrip("/")
    before = {i["id"]: i for i in _incidents(api)}
    sent_before = _chat_sent(api)
    sim_now = float(requests.get(f"{sim}/fleet", timeout=10).json()["now"])
    first = min((f.start for f in sc.faults), default=0.0)
    injected: list[str] = []
    started = datetime.now(UTC)
    expected = expected_truths(sc.truth.model_dump(), [a.model_dump() for a in sc.also])
    try:
        for n, fault in enumerate(sc.faults):
            body: dict[str, Any] = {"kind": fault.kind, "node": fault.node, "id": f"drill-{sc.name}-{n}",
                                    "start": sim_now + (fault.start - first) * target.time_scale}
            if fault.gpu is not None:
                body["gpu"] = fault.gpu
            if fault.link is not None:
                body["link"] = fault.link
            if fault.strength is not None:
                body["strength"] = fault.strength
            if fault.duration is not None:
                body["duration_s"] = fault.duration * target.time_scale
            resp = requests.post(f"{sim}/admin/faults", json=body, headers=headers, timeout=10)
            if resp.status_code != 201:
                raise OximeterError(f"simulator refused fault {n} ({fault.kind}): "
                                    f"{resp.status_code} {resp.text[:200]}")
            injected.append(body["id"])
        new = _watch(api, before, started, expected, target)
    finally:
        for fault_id in injected:
            requests.delete(f"{sim}/admin/faults/{fault_id}", headers=headers, timeout=10)
    told = {i["id"]: [c["kind"] for c in _notifications(api, i["id"])
                      if c["kind"] in NOTIFY_KINDS and (parse_when(c.get("at")) or started) >= started]
            for i in new}
    # Everything chat got meanwhile (forwarded Alertmanager alerts too), once the outbox drained.
    sent = _chat_sent(api, settle_s=target.quiet_s)
    chat = max((n - sent_before.get(ch, 0.0) for ch, n in sent.items()), default=0.0)
    messages = max(sum(len(k) for k in told.values()), int(chat))
    return score(sc.name, "live", expected, new, started, messages,
                 sum(message_budget(kinds) for kinds in told.values()))


def _incidents(api: str) -> list[dict[str, Any]]:
    import requests

    resp = requests.get(f"{api}/api/incidents", timeout=10)
    resp.raise_for_status()
    return list(resp.json()["incidents"])


def _chat_sent(api: str, settle_s: float = 0.0) -> dict[str, float]:
    """Messages sent per chat channel so far (the analyzer's ``oximeter_notifications_total``),
    after waiting up to ``settle_s`` for its outbox to drain; empty when it does not say."""
    import requests
    from prometheus_client.parser import text_string_to_metric_families

    deadline = time.monotonic() + settle_s
    while True:
        resp = requests.get(f"{api}/metrics", timeout=10)
        if not resp.ok:
            return {}
        families = {f.name: f for f in text_string_to_metric_families(resp.text)}
        pending = families.get("oximeter_outbox_pending")
        if pending is None or not any(s.value for s in pending.samples) or time.monotonic() >= deadline:
            break
        time.sleep(1.0)
    family = families.get("oximeter_notifications")
    return {} if family is None else {
        s.labels["channel"]: s.value for s in family.samples
        if s.name.endswith("_total") and s.labels.get("result") == "sent"}


def _notifications(api: str, incident_id: str) -> list[dict[str, Any]]:
    import requests

    resp = requests.get(f"{api}/api/incidents/{incident_id}", timeout=10)
    return list(resp.json().get("notifications", [])) if resp.ok else []


def _touched(incidents: list[dict[str, Any]], before: Mapping[str, Mapping[str, Any]],
             since: datetime) -> list[dict[str, Any]]:
    """Incidents opened since the injection, or older ones that took evidence detected since then
    (an open incident on the same node absorbs the drill's anomalies and changes its root cause)."""
    def fresh(inc: Mapping[str, Any]) -> bool:
        return any((when := parse_when(e.get("detected_at"))) is not None and when >= since
                   for e in inc.get("evidence", []))

    return [i for i in incidents if i["id"] not in before or fresh(i)]


def _watch(api: str, before: Mapping[str, Mapping[str, Any]], since: datetime, expected: list[dict[str, Any]],
           target: LiveTarget) -> list[dict[str, Any]]:
    """Incidents the drill touched, polled until every expected root cause is named (or quiet_s
    for a fault-free scenario)."""
    limit = target.quiet_s if not expected else target.timeout_s
    deadline = time.monotonic() + limit
    new: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        new = _touched(_incidents(api), before, since)
        if expected and all(any(truth_matches(i, t) for i in new) for t in expected):
            break
        time.sleep(target.poll_s)
    return new
