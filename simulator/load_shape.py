"""The shape of simulated load: traffic over a compressed day, and the mix of requests.

Shared by the traffic generator (``oximeter traffic``), the trace schedule, the arrival streams and
the simulated history, so that live and simulated traffic follow the same day.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# Hours of the day (0-24) where traffic peaks and how strong each peak is: a late-morning and an
# evening peak over a night floor, the usual shape of a consumer chat service.
_PEAKS = ((11.0, 2.5, 0.9), (20.5, 2.0, 1.0))
_NIGHT_FLOOR = 0.25


def day_multiplier(hour: float) -> float:
    """Unnormalised traffic level at ``hour`` (0-24) of a simulated day."""
    level = _NIGHT_FLOOR
    for centre, width, height in _PEAKS:
        distance = min(abs(hour - centre), 24 - abs(hour - centre))
        level += height * math.exp(-((distance / width) ** 2))
    return level


_DAY_MEAN = sum(day_multiplier(m / 60) for m in range(1440)) / 1440


def daily_rate(elapsed_s: float, day_s: float, base_rps: float, start_hour: float = 0.0, *,
               shaped: bool = True) -> float:
    """Requests per second at ``elapsed_s`` when one day lasts ``day_s``; ``base_rps`` is the daily mean
    (and the rate at every hour when not ``shaped``: a scenario's ``daily_shape: false``)."""
    if not shaped:
        return base_rps
    hour = (start_hour + 24.0 * elapsed_s / day_s) % 24.0
    return base_rps * day_multiplier(hour) / _DAY_MEAN


@dataclass(frozen=True)
class RequestMix:
    """Shape of the generated requests."""

    model: str = "default"
    stream_ratio: float = 0.7
    # Prompt and output lengths in tokens (one word ≈ one token), log-normal like real chat traffic.
    prompt_tokens_median: int = 200
    output_tokens_median: int = 64
    length_sigma: float = 0.8
    max_output_tokens: int = 512
    # A few long system prompts shared by many requests, so the engine's prefix cache has work.
    shared_prefixes: int = 4
    shared_prefix_tokens: int = 256
    shared_prefix_ratio: float = 0.6
