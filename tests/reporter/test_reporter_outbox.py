"""The outbox step by step: dedup, back-off, Retry-After, give-up, storm control, reclaim, metrics."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest
from chat_receiver import ChatReceiver, MakeChannel
from pg_server import StoreSpace
from prometheus_client import CollectorRegistry
from sample_messages import alert

from oximeter.store import connect
from reporter.channels import Channel
from reporter.message import Message
from reporter.outbox import Outbox, OutboxPolicy

T0 = 1_000_020.0  # a window boundary for 60 s windows (1_000_020 = 16_667 × 60)


def _outbox(stores: StoreSpace, channels: dict[str, Channel],
            **policy: float) -> tuple[Outbox, CollectorRegistry]:
    registry = CollectorRegistry()
    settings = {"retry_base_s": 2.0, "retry_max_s": 10.0, "max_attempts": 5, "storm_window_s": 60.0, **policy}
    outbox = Outbox(connect(stores / "oximeter.db"), channels, OutboxPolicy(**settings),  # type: ignore[arg-type]
                    registry=registry)
    return outbox, registry


def _count(registry: CollectorRegistry, channel: str, result: str) -> float | None:
    return registry.get_sample_value("oximeter_notifications_total", {"channel": channel, "result": result})


def _states(outbox: Outbox) -> list[tuple[str, str, int]]:
    return [(r.idempotency_key, r.state, r.attempts) for r in outbox.rows()]


def test_enqueue_is_idempotent_per_channel_and_delivers_once(stores: StoreSpace, receiver: ChatReceiver,
                                                             make_channel: MakeChannel) -> None:
    outbox, registry = _outbox(stores, {"ops": make_channel("webhook"), "team": make_channel("wecom")})
    assert registry.get_sample_value("oximeter_outbox_pending") == 0
    assert len(outbox.enqueue(alert("incident-1:opened:1"), now=T0)) == 2
    assert outbox.enqueue(alert("incident-1:opened:1"), now=T0 + 1) == []
    assert len(outbox.enqueue(alert("incident-1:resolved:2"), ["ops"], now=T0 + 1)) == 1
    assert registry.get_sample_value("oximeter_outbox_pending") == 3
    assert outbox.deliver_due(T0 + 1) == 3
    assert outbox.deliver_due(T0 + 2) == 0
    assert [r.state for r in outbox.rows()] == ["sent"] * 3
    assert receiver.accepted_keys() == {"incident-1:opened:1": 1, "incident-1:resolved:2": 1}
    assert len(receiver.accepted("wecom")) == 1
    assert registry.get_sample_value("oximeter_outbox_pending") == 0
    counts = [_count(registry, "ops", "sent"), _count(registry, "team", "sent"),
              _count(registry, "ops", "failed")]
    assert counts == [2.0, 1.0, 0.0]


def test_exponential_backoff_then_give_up(stores: StoreSpace, receiver: ChatReceiver,
                                          make_channel: MakeChannel) -> None:
    outbox, registry = _outbox(stores, {"ops": make_channel("webhook")})
    receiver.script("webhook", *["http_503"] * 5)
    outbox.enqueue(alert("k"), now=T0)
    schedule = []
    now = T0
    for _ in range(5):
        assert outbox.deliver_due(now) == 1
        [row] = outbox.rows()
        schedule.append((row.state, row.attempts, row.next_attempt_at - now))
        assert outbox.deliver_due(now + 0.5) == 0  # not due again before its back-off
        now = row.next_attempt_at
    assert schedule == [("pending", 1, 2.0), ("pending", 2, 4.0), ("pending", 3, 8.0),
                        ("pending", 4, 10.0), ("failed", 5, 0.0)]
    assert (_count(registry, "ops", "retry"), _count(registry, "ops", "failed")) == (4.0, 1.0)
    assert outbox.rows()[0].last_error == "http 503: service unavailable"


def test_retry_after_is_honoured_and_permanent_errors_fail_at_once(stores: StoreSpace, receiver: ChatReceiver,
                                                                  make_channel: MakeChannel) -> None:
    outbox, _ = _outbox(stores, {"slack": make_channel("slack"), "wecom": make_channel("wecom")})
    receiver.script("slack", "throttled")
    receiver.script("wecom", "permanent")
    outbox.enqueue(alert("k"), now=T0)
    outbox.deliver_due(T0)
    by_channel = {r.channel: r for r in outbox.rows()}
    assert (by_channel["slack"].state, by_channel["slack"].next_attempt_at) == ("pending", T0 + 7.0)
    assert by_channel["slack"].attempts == 0  # a 429 with Retry-After is throttling, not a failed try
    assert (by_channel["wecom"].state, by_channel["wecom"].attempts) == ("failed", 1)
    assert by_channel["wecom"].last_error == "93000: invalid webhook url"


def test_storm_control_caps_then_sends_one_summary(stores: StoreSpace, receiver: ChatReceiver,
                                                   make_channel: MakeChannel) -> None:
    outbox, registry = _outbox(stores, {"ops": make_channel("webhook")}, storm_cap=2)
    severities = ["info", "warning", "critical", "info", "warning"]
    for i, severity in enumerate(severities):
        outbox.enqueue(alert(f"k{i}", severity=severity, title=f"alert {i}"), now=T0 + i)
    assert _states(outbox) == [("k0", "pending", 0), ("k1", "pending", 0), ("k2", "suppressed", 0),
                               ("storm-summary:1000020", "pending", 0), ("k3", "suppressed", 0),
                               ("k4", "suppressed", 0)]
    assert outbox.deliver_due(T0 + 10) == 2  # the summary waits for the window to close
    assert outbox.deliver_due(T0 + 60) == 1
    summary = receiver.accepted("webhook")[-1].data
    assert summary["title"] == "3 more notifications held back by storm control"
    assert summary["severity"] == "critical"
    assert summary["sections"][0]["body"] == "- [P0] alert 2\n- [P2] alert 3\n- [P1] alert 4"
    assert [r.data["idempotency_key"] for r in receiver.accepted("webhook")] == ["k0", "k1",
                                                                                "storm-summary:1000020"]
    assert (_count(registry, "ops", "suppressed"), _count(registry, "ops", "sent")) == (3.0, 3.0)
    outbox.enqueue(alert("k5"), now=T0 + 61)  # a new window: sent normally
    assert outbox.rows()[-1].state == "pending"


def test_local_rate_limit_leaves_messages_queued_without_counting_attempts(
        stores: StoreSpace, receiver: ChatReceiver, make_channel: MakeChannel) -> None:
    now = [0.0]
    outbox, _ = _outbox(stores, {"team": make_channel("wecom", clock=lambda: now[0])}, storm_cap=100)
    for i in range(22):
        outbox.enqueue(alert(f"k{i}"), now=T0)
    assert outbox.deliver_due(T0) == 22
    states = [(r.state, r.attempts) for r in outbox.rows()]
    assert states == [("sent", 1)] * 20 + [("pending", 0)] * 2
    assert outbox.rows()[-1].next_attempt_at == T0 + 60.0
    now[0] = 60.0
    assert outbox.deliver_due(T0 + 60) == 2
    assert len(receiver.accepted("wecom")) == 22


def test_a_rate_limited_retry_keeps_the_last_error(stores: StoreSpace, receiver: ChatReceiver,
                                                  make_channel: MakeChannel) -> None:
    outbox, _ = _outbox(stores, {"team": make_channel("wecom", clock=lambda: 0.0)}, storm_cap=100)
    receiver.script("wecom", *["http_503"] * 20)
    for i in range(21):
        outbox.enqueue(alert(f"k{i}"), now=T0)
    assert outbox.deliver_due(T0) == 21  # twenty fail, the twenty-first waits on the local limit
    assert outbox.deliver_due(T0 + 60) == 21  # the limiter's clock stands still: all wait
    rows = outbox.rows()
    assert [(r.state, r.attempts, r.last_error) for r in rows] == (
        [("pending", 1, "http 503: service unavailable")] * 20 + [("pending", 0, None)])


def test_rows_claimed_by_a_dead_process_are_delivered_again(stores: StoreSpace, receiver: ChatReceiver,
                                                            make_channel: MakeChannel) -> None:
    outbox, _ = _outbox(stores, {"ops": make_channel("webhook")}, claim_lease_s=100.0)
    outbox.enqueue(alert("dead"), now=T0)
    outbox.enqueue(alert("alive"), now=T0)
    outbox.enqueue(alert("expired"), now=T0)
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    host = outbox.worker_id.split(":")[0]
    owners = {"dead": f"{host}:{gone.stdout.strip()}:x", "alive": f"{host}:1:x", "expired": "other-host:1:x"}
    claimed_at = {"dead": T0, "alive": T0, "expired": T0 - 101}
    for key, owner in owners.items():
        outbox.conn.execute("UPDATE outbox SET state = 'delivering', claimed_by = ?, claimed_at = ?"
                            " WHERE idempotency_key = ?", (owner, claimed_at[key], key))
    assert outbox.deliver_due(T0) == 2
    assert {r.idempotency_key: r.state for r in outbox.rows()} == {"dead": "sent", "alive": "delivering",
                                                                   "expired": "sent"}


def test_purge_keeps_what_is_not_done(stores: StoreSpace, receiver: ChatReceiver,
                                      make_channel: MakeChannel) -> None:
    outbox, _ = _outbox(stores, {"ops": make_channel("webhook")}, storm_cap=1)
    outbox.enqueue(alert("sent"), now=T0)
    outbox.deliver_due(T0)
    outbox.enqueue(alert("suppressed"), now=T0)
    outbox.enqueue(alert("failed"), ["other"], now=T0)
    outbox.enqueue(alert("pending"), ["ops"], now=T0 + 120)
    outbox.deliver_due(T0)
    assert outbox.purge(before=T0 + 1) == 2
    assert [(r.idempotency_key, r.state) for r in outbox.rows()] == [
        ("storm-summary:1000020", "pending"), ("failed", "failed"), ("pending", "pending")]


def test_unknown_channel_fails_and_message_round_trips(stores: StoreSpace) -> None:
    outbox, _ = _outbox(stores, {})
    message = alert("k", image_png=b"\x89PNG\r\n\x1a\nxx")
    assert Message.from_json(message.to_json()) == message
    outbox.enqueue(message, ["gone"], now=T0)
    outbox.deliver_due(T0)
    [row] = outbox.rows()
    assert (row.state, row.last_error) == ("failed", "channel 'gone' is not configured")
    with pytest.raises(ValueError, match="idempotency_key"):
        outbox.enqueue(alert(""), now=T0)


def test_a_malformed_row_fails_alone(stores: StoreSpace, receiver: ChatReceiver,
                                     make_channel: MakeChannel) -> None:
    outbox, _ = _outbox(stores, {"ops": make_channel("webhook")})
    outbox.enqueue(alert("bad"), now=T0)
    outbox.enqueue(alert("good"), now=T0)
    outbox.conn.execute("UPDATE outbox SET payload = '{\"no\": \"title\"}' WHERE idempotency_key = 'bad'")
    assert outbox.deliver_due(T0) == 2
    assert [(r.idempotency_key, r.state, r.last_error) for r in outbox.rows()] == [
        ("bad", "failed", "invalid: KeyError: 'title'"), ("good", "sent", None)]


def test_two_deliverers_on_one_store_send_each_message_once(stores: StoreSpace, receiver: ChatReceiver,
                                                            make_channel: MakeChannel) -> None:
    """Replicas sharing a store deliver its outbox side by side: every row claimed by one of them."""
    channel = make_channel("webhook")
    first, _ = _outbox(stores, {"ops": channel}, storm_cap=1000)
    second, _ = _outbox(stores, {"ops": make_channel("webhook")}, storm_cap=1000)
    # No more than one channel's client-side rate limit allows in its window: whichever deliverer
    # runs ahead (a loaded machine lets one take nearly every row) is never throttled, so each row
    # is attempted exactly once and a second attempt would be a double claim.
    keys = [f"incident-{i}:opened:1" for i in range(channel.rate_count)]
    for key in keys:
        first.enqueue(alert(key), now=T0)
    attempted: dict[str, int] = {}

    def deliver(outbox: Outbox) -> None:
        # Small batches, so that the two claim in turns rather than one taking everything.
        deadline = time.monotonic() + 60
        while outbox.next_due_at() is not None and time.monotonic() < deadline:
            attempted[outbox.worker_id] = attempted.get(outbox.worker_id, 0) + outbox.deliver_due(T0, limit=2)

    threads = [threading.Thread(target=deliver, args=(outbox,)) for outbox in (first, second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert receiver.accepted_keys() == dict.fromkeys(keys, 1)
    assert sum(attempted.values()) == len(keys)
    assert {r.state for r in first.rows()} == {"sent"}
    second.conn.close()
