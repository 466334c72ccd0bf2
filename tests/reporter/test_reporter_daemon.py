"""``oximeter analyze`` with a chat channel: the incident reaches chat through the outbox, the relay
answers on the daemon's API, and an alert about the open incident sends no second message."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import requests
from chat_receiver import ChatReceiver

from stack.ports import wait_port
from stack.procs import ManagedProcess, http_ok, oximeter_argv, wait_until

TOKEN = "daemon-relay-token"


def _signals(path: Path) -> Path:
    """Two hours at 15 s: a paging Xid on n1/GPU 2 from 10:00 on."""
    index = pd.date_range("2026-03-02T09:00:00Z", periods=480, freq="15s")
    values = [1.0 if i >= 240 else 0.0 for i in range(len(index))]
    pd.DataFrame({"timestamp": index, "signal": "xid_paging", "node": "n1", "gpu": "2", "xid": "79",
                  "value": values}).to_parquet(path, index=False)
    return path


def _alert(name: str, **labels: str) -> dict[str, object]:
    return {"status": "firing", "labels": {"alertname": name, **labels}, "annotations": {},
            "startsAt": "2026-03-02T10:05:00Z", "fingerprint": f"fp-{name}"}


def test_daemon_notifies_and_relays(tmp_path: Path, receiver: ChatReceiver,
                                    start_process: Callable[..., ManagedProcess]) -> None:
    (tmp_path / "oximeter.yaml").write_text(json.dumps({"analyzer": {"interval_s": 2}, "reporter": {
        "simulated": True, "grafana_url": "http://grafana.example",
        "channels": {"chat": {"type": "webhook", "url_env": "CHAT_URL", "secret_env": "CHAT_SECRET"}}}}))
    env = {"CHAT_URL": receiver.url("webhook"), "CHAT_SECRET": receiver.secrets["webhook"] or "",
           "OXIMETER_API_TOKEN": TOKEN}
    signals = _signals(tmp_path / "s.parquet")
    daemon = start_process("analyze", oximeter_argv(
        "--config", str(tmp_path / "oximeter.yaml"), "analyze", "--signals", str(signals),
        "--replay-start", "2026-03-02T10:10:00Z", "--speed", "1", "--store", str(tmp_path / "oximeter.db"),
        "--port", "0", "--port-file", str(tmp_path / "api.port")), env=env)
    port = wait_port(daemon, tmp_path / "api.port")
    daemon.wait_ready(lambda: http_ok(f"http://127.0.0.1:{port}/openapi.json"), 60)
    wait_until(lambda: receiver.accepted("webhook"), 60, what="the incident's message in chat")
    (opened,) = receiver.accepted("webhook")
    assert opened.data["title"].startswith("OPENED: [infrastructure] xid_critical")
    assert opened.data["simulation"] is True
    assert opened.data["idempotency_key"].endswith(":opened:1")

    url, auth = f"http://127.0.0.1:{port}/api/alertmanager", {"Authorization": f"Bearer {TOKEN}"}
    body = {"version": "4", "groupKey": "g", "status": "firing", "groupLabels": {}, "commonLabels": {},
            "alerts": [_alert("GpuXidPaging", node="n1", gpu="2", layer="infrastructure",
                              severity="critical"),
                       _alert("QueueBackedUp", node="n9", layer="scheduling", severity="warning")]}
    reply = requests.post(url, json=body, headers=auth, timeout=10)
    assert reply.status_code == 200, reply.text
    outcome = reply.json()
    assert [e["fingerprint"] for e in outcome["evidence"]] == ["fp-GpuXidPaging"]
    assert outcome["forwarded"] == ["fp-QueueBackedUp"]
    wait_until(lambda: len(receiver.accepted("webhook")) == 2, 30, what="the forwarded alert in chat")
    assert receiver.accepted("webhook")[1].data["title"] == "[FIRING:1] QueueBackedUp (all)"
    assert requests.post(url, json=body, timeout=10).status_code == 401
    # The receiver has the message before the worker records the delivery: wait for the record.
    def delivered() -> str | None:
        text = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
        done = ('oximeter_notifications_total{channel="chat",result="sent"} 2.0' in text
                and "oximeter_outbox_pending 0.0" in text)
        return text if done else None

    metrics = str(wait_until(delivered, 30, what="both deliveries recorded in the daemon's metrics"))
    assert "oximeter_relay_watchdog_last_seen_timestamp_seconds 0.0" in metrics
    # The next cycles attach the matching alert to the incident as evidence (a change event).
    incident_id = opened.data["idempotency_key"].rsplit(":", 2)[0]

    def attached() -> list[dict[str, object]]:
        incident = requests.get(f"http://127.0.0.1:{port}/api/incidents/{incident_id}", timeout=5).json()
        return [c for c in incident["changes"] if c["kind"] == "alert"]

    wait_until(attached, 60, what="the alert attached to the incident")
    assert [(c["source"], c["labels"]) for c in attached()] == [
        ("alertmanager", {"incident": incident_id, "layer": "infrastructure", "node": "n1"})]
    assert daemon.stop() == 0
    assert len(receiver.accepted("webhook")) == 2 and receiver.problems == []
