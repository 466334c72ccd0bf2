"""One node's request stream in history: Poisson gaps and log-normal lengths from one seeded generator.

``NodeHistory`` draws from it in virtual time; ``constant_rate_schedule`` draws the very same
requests up front, so a live run can replay exactly what a history saw (the live/history
agreement test). Draw order is part of the contract: a gap, then a request's prompt and output
lengths, then the next gap.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from simulator.load_shape import RequestMix

# History caps prompts at half the simulator's 8192-token context.
MAX_PROMPT_TOKENS = 4096


@dataclass(frozen=True)
class Arrival:
    """One request: when it arrives (seconds from the start) and its lengths in tokens."""

    at_s: float
    prompt_tokens: int
    output_tokens: int


class ArrivalStream:
    """The seeded draws of one node (``seed/node``), so every node has its own stream."""

    def __init__(self, seed: int, node: str, mix: RequestMix) -> None:
        self.mix = mix
        self._rng = random.Random(f"{seed}/{node}")

    def gap_s(self, rate_rps: float) -> float:
        """Seconds to the next arrival at ``rate_rps`` (Poisson)."""
        return self._rng.expovariate(max(1e-6, rate_rps))

    def lengths(self) -> tuple[int, int]:
        """Prompt and output tokens of the request arriving now (log-normal, capped)."""
        mix = self.mix
        return (
            self._lognormal(mix.prompt_tokens_median, MAX_PROMPT_TOKENS),
            self._lognormal(mix.output_tokens_median, mix.max_output_tokens),
        )

    def _lognormal(self, median: int, cap: int) -> int:
        return min(cap, max(1, round(self._rng.lognormvariate(math.log(median), self.mix.length_sigma))))


def _capped_lognormal_mean(median: float, sigma: float, cap: float) -> float:
    """E[min(cap, X)] for a log-normal X: the part below the cap plus the cap times P(X > cap)."""
    mu, below = math.log(median), (math.log(cap) - math.log(median)) / sigma

    def phi(z: float) -> float:
        return 0.5 * (1.0 + math.erf(z / math.sqrt(2.0)))

    return math.exp(mu + sigma**2 / 2) * phi(below - sigma) + cap * (1.0 - phi(below))


def mean_lengths(mix: RequestMix) -> tuple[float, float]:
    """The mean prompt and output tokens of the requests an ``ArrivalStream`` draws from ``mix``."""
    return (_capped_lognormal_mean(mix.prompt_tokens_median, mix.length_sigma, MAX_PROMPT_TOKENS),
            _capped_lognormal_mean(mix.output_tokens_median, mix.length_sigma, mix.max_output_tokens))


def constant_rate_schedule(
    seed: int, node: str, mix: RequestMix, rate_rps: float, duration_s: float
) -> list[Arrival]:
    """Every arrival before ``duration_s`` that a flat-traffic history of ``node`` draws."""
    stream = ArrivalStream(seed, node, mix)
    out: list[Arrival] = []
    t = stream.gap_s(rate_rps)
    while t < duration_s:
        prompt, output = stream.lengths()
        out.append(Arrival(t, prompt, output))
        t += stream.gap_s(rate_rps)
    return out
