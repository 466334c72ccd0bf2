"""Clocks: the live server runs on real time, the history generator on virtual time.

The engine and GPU models only ever ask a clock for ``now()`` (seconds since the simulation
began), so the very same model runs behind HTTP and in bulk history without change.
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    """Seconds since the simulation began; monotonic."""

    def now(self) -> float:
        """Current simulation time in seconds."""
        ...


class RealClock:
    """Monotonic wall time, zero at construction (NTP steps cannot move it backwards)."""

    def __init__(self) -> None:
        self._origin = time.monotonic()

    def now(self) -> float:
        """Seconds since this clock was created."""
        return time.monotonic() - self._origin


class VirtualClock:
    """Time that only moves when told to: exact, repeatable, and as fast as the CPU allows."""

    def __init__(self, start_s: float = 0.0) -> None:
        self._now = start_s

    def now(self) -> float:
        """The current virtual time."""
        return self._now

    def advance(self, dt_s: float) -> float:
        """Move time forward by ``dt_s`` (never backwards) and return the new time."""
        if dt_s < 0:
            raise ValueError(f"a clock cannot go backwards (dt_s={dt_s})")
        self._now += dt_s
        return self._now

    def set(self, t_s: float) -> None:
        """Jump forward to ``t_s``."""
        self.advance(t_s - self._now)
