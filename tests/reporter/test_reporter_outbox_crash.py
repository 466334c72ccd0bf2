"""Issue 7 must-show 2: the receiver is down, messages queue, the deliverer is SIGKILLed and
restarted, the receiver comes back: every message arrives, none twice per idempotency key."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import yaml
from chat_receiver import SECRETS, WEBHOOK_TOKEN, ChatReceiver
from sample_messages import alert

from oximeter.store import connect
from reporter.outbox import Outbox
from stack.procs import oximeter_argv, wait_until
from tests.conftest import StartProcess

KEYS = [f"incident-{i}:opened:1" for i in range(8)]


def _write_config(tmp_path: Path, store: Path) -> Path:
    config = tmp_path / "oximeter.yaml"
    config.write_text(yaml.safe_dump({"reporter": {
        "store_path": str(store),
        "channels": {"ops": {"type": "webhook", "url_env": "OXI_TEST_HOOK_URL",
                             "secret_env": "OXI_TEST_HOOK_SECRET"}},
        "retry_base_s": 0.1, "retry_max_s": 0.4, "max_attempts": 10_000, "storm_cap": 100,
    }}))
    return config


def test_outbox_survives_sigkill_while_the_receiver_is_down(tmp_path: Path,
                                                            start_process: StartProcess) -> None:
    store = tmp_path / "oximeter.db"
    config = _write_config(tmp_path, store)
    receiver = ChatReceiver()  # not started: the chat service is down
    env = {"OXI_TEST_HOOK_URL": receiver.url("webhook"), "OXI_TEST_HOOK_SECRET": SECRETS["webhook"]}
    outbox = Outbox(connect(store))
    for key in KEYS:
        outbox.enqueue(alert(key), ["ops"], now=time.time())
    argv = oximeter_argv("--config", str(config), "outbox", "deliver", "--interval-s", "0.05")

    first = start_process("deliver-1", argv, env=env)
    wait_until(lambda: all(row.attempts >= 2 for row in outbox.rows()), 60, what="two failed attempts each")
    first.signal(signal.SIGKILL)
    assert first.proc is not None
    first.proc.wait(30)
    rows = outbox.rows()
    assert {row.state for row in rows} <= {"pending", "delivering"}
    assert all((row.last_error or "").startswith("connection: ConnectionError") for row in rows), rows
    if not any(row.state == "delivering" for row in rows):
        # What a kill in the middle of a send leaves behind: a row claimed by the dead process.
        host = outbox.worker_id.split(":")[0]
        owner = f"{host}:{first.proc.pid}:dead"
        outbox.conn.execute("UPDATE outbox SET state = 'delivering', claimed_by = ?, claimed_at = ?"
                            " WHERE idempotency_key = ?", (owner, time.time(), KEYS[0]))
    # Announcing the same changes again after the crash queues nothing new.
    assert [outbox.enqueue(alert(key), ["ops"], now=time.time()) for key in KEYS] == [[]] * len(KEYS)

    second = start_process("deliver-2", argv, env=env)
    receiver.start()
    try:
        wait_until(lambda: all(row.state == "sent" for row in outbox.rows()), 60, what="all sent")
    finally:
        receiver.stop()
    second.stop()
    assert receiver.accepted_keys() == {key: 1 for key in KEYS}
    assert receiver.problems == []  # signed, and the signature verified
    logs = first.log_tail(500) + second.log_tail(500)
    assert "delivery failed, retrying" in logs
    assert WEBHOOK_TOKEN not in logs and SECRETS["webhook"] not in logs
