"""Re-sent requests: the same client sending the same request again within seconds.

One rule, so the count means one thing: a request is a retry when the key it carries, its
``Idempotency-Key`` header or else the ``X-Request-ID`` the client chose, was already seen on this
gateway within the last ``window_s`` seconds. A request with neither header is never counted: a
client address alone cannot tell a retry from a busy client, or from many clients behind one NAT.
A storm of retries (clients re-sending after timeouts or 429s) multiplies the load it reacts to.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping

RETRY_KEY_HEADERS = ("Idempotency-Key", "X-Request-ID")


def retry_key(headers: Mapping[str, str]) -> str | None:
    """The key a request is recognised by when re-sent: the first of ``RETRY_KEY_HEADERS`` it carries."""
    for name in RETRY_KEY_HEADERS:
        value = headers.get(name)
        if value:
            return value
    return None


class RetryTracker:
    """Remembers each key's last sighting for ``window_s`` (at most ``max_keys`` of them: past that
    the oldest are forgotten, so a flood of fresh keys cannot grow the gateway's memory)."""

    def __init__(self, window_s: float, max_keys: int = 100_000) -> None:
        if window_s <= 0 or max_keys < 1:
            raise ValueError("window_s must be positive and max_keys at least 1")
        self.window_s = window_s
        self.max_keys = max_keys
        # Ordered by last sighting (a key seen again moves to the end), so expiry pops from the front.
        self._last: OrderedDict[str, float] = OrderedDict()

    def __len__(self) -> int:
        return len(self._last)

    def seen(self, key: str | None, now: float) -> bool:
        """Record a request with ``key`` at ``now`` (monotonic seconds); True when it is a retry."""
        while self._last:
            oldest, at = next(iter(self._last.items()))
            if now - at <= self.window_s:
                break
            del self._last[oldest]
        if key is None:
            return False
        before = self._last.pop(key, None)
        self._last[key] = now
        if len(self._last) > self.max_keys:
            self._last.popitem(last=False)
        return before is not None
