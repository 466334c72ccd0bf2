"""Which requests count as retries: one rule (the Idempotency-Key, else the client's X-Request-ID,
seen within the window), judged on a given clock."""

from __future__ import annotations

import pytest

from gateway.retries import RetryTracker, retry_key


@pytest.mark.parametrize(("headers", "key"), [
    ({"Idempotency-Key": "k1", "X-Request-ID": "r1"}, "k1"),  # the idempotency key wins
    ({"X-Request-ID": "r1"}, "r1"),
    ({"Idempotency-Key": "", "X-Request-ID": "r1"}, "r1"),  # an empty header is no key
    ({}, None),  # no key: never a retry, whatever the client address
])
def test_the_key_a_request_is_known_by(headers: dict[str, str], key: str | None) -> None:
    assert retry_key(headers) == key


# (key, seconds since start, counted as a retry) in order, with a 10 s window.
SEQUENCE = [
    ("a", 0.0, False),  # first sighting
    ("a", 2.0, True),  # the same key within seconds: re-sent
    ("a", 4.0, True),  # and again: a burst counts each re-send
    ("b", 4.5, False),  # another request
    ("a", 14.0, True),  # 10 s after its last sighting: still inside the window
    ("a", 24.5, False),  # 10.5 s after: a new request that reuses its key
    (None, 25.0, False),  # no key
    (None, 25.1, False),
    ("b", 30.0, False),  # forgotten long ago
]


def test_a_burst_of_retries_is_counted_and_ordinary_traffic_is_not() -> None:
    tracker = RetryTracker(window_s=10.0)
    assert [tracker.seen(key, now) for key, now, _ in SEQUENCE] == [retry for _, _, retry in SEQUENCE]


def test_ordinary_traffic_with_fresh_keys_counts_nothing_and_memory_stays_bounded() -> None:
    tracker = RetryTracker(window_s=10.0, max_keys=50)
    assert not any(tracker.seen(f"req-{i}", i * 0.01) for i in range(1000))
    assert len(tracker) == 50
    # Keys older than the window are dropped as time moves on.
    tracker.seen("late", 100.0)
    assert len(tracker) == 1


def test_a_bad_window_is_refused() -> None:
    with pytest.raises(ValueError):
        RetryTracker(window_s=0)
