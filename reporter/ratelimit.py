"""Client-side rate limit per channel: a sliding window on ``time.monotonic`` that never sleeps.

The delivery step asks ``wait_s()`` and leaves the message queued when it is positive, so the
step stays free of sleeps and tests drive it with a fake clock.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable


class SlidingWindowLimiter:
    """At most ``count`` sends in any ``window_s`` seconds."""

    def __init__(self, count: int, window_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        if count < 1 or window_s <= 0:
            raise ValueError("rate limit needs count >= 1 and window_s > 0")
        self.count = count
        self.window_s = window_s
        self.clock = clock
        self._sent: deque[float] = deque()

    def _expire(self, now: float) -> None:
        while self._sent and now - self._sent[0] >= self.window_s:
            self._sent.popleft()

    def wait_s(self) -> float:
        """Seconds until one more send is allowed (0 when allowed now)."""
        now = self.clock()
        self._expire(now)
        if len(self._sent) < self.count:
            return 0.0
        return self._sent[0] + self.window_s - now

    def record(self) -> None:
        """Count one send made now."""
        now = self.clock()
        self._expire(now)
        self._sent.append(now)
