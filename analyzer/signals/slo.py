"""Service level objectives (the ``slos:`` section): what a bad request is, and how many a service may have.

An objective names a service (every service, each on its own, when unset) and a model (all of the
service's models together, when unset); its availability target with the answers that count as
bad; latency targets (the share of requests whose time to first token, queue wait or duration is
within a threshold); and the window the budget is counted over. ``oximeter rules build`` writes
their error-ratio recording rules and burn-rate alerts (``analyzer/signals/slo_rules.py``); ``oximeter
config check`` refuses a threshold the histogram cannot count against (``threshold_problems``).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from gateway.metrics import LATENCY_BUCKETS_S, QUEUE_WAIT_BUCKETS_S
from oximeter.buckets import VLLM_REQUEST_LATENCY_BUCKETS_S, VLLM_TTFT_BUCKETS_S

Indicator = Literal["ttft", "queue_wait", "request_duration"]
DAY_S = 86400.0
# A status class ("5xx") or one code ("504"): what the availability objective counts as bad.
_CODE = re.compile(r"^[1-5](xx|\d\d)$")
_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]*$")
# A label value the rules quote in PromQL as written: no quote, backslash or line break.
_LABEL_VALUE = re.compile(r'^[^"\\\n]*$')


@dataclass(frozen=True)
class Histogram:
    """The histogram a latency indicator reads: its name (the gateway's, which the stock adapter
    records vLLM's under) and the bucket bounds each telemetry source gives it."""

    metric: str
    gateway_bounds_s: tuple[float, ...]
    vllm_bounds_s: tuple[float, ...]


HISTOGRAMS: dict[str, Histogram] = {
    "ttft": Histogram("oximeter_time_to_first_token_seconds", LATENCY_BUCKETS_S, VLLM_TTFT_BUCKETS_S),
    "queue_wait": Histogram("oximeter_queue_wait_seconds", QUEUE_WAIT_BUCKETS_S,
                            VLLM_REQUEST_LATENCY_BUCKETS_S),
    "request_duration": Histogram("oximeter_request_duration_seconds", LATENCY_BUCKETS_S,
                                  VLLM_REQUEST_LATENCY_BUCKETS_S),
}


def _bounds_text(bounds: tuple[float, ...]) -> str:
    return ", ".join(f"{b:g}" for b in bounds)


class Availability(BaseModel):
    """The share of answers that must not be bad, and which answers are."""

    model_config = ConfigDict(extra="forbid")

    # Share of answers that must be good, e.g. 0.999 (a budget of one bad answer in a thousand).
    target: float = Field(0.999, gt=0, lt=1)
    # Status codes that count as bad: a class ("5xx") or a code ("504", "499": the client went away
    # before the answer ended). 5xx are the service failing (502 engine broken, 503 unavailable,
    # 504 no first byte in time); 429 is the gateway refusing work it cannot serve in time. A
    # client cut-off is left out by default: a user's stop button makes one too, and a slow answer
    # that drives clients away spends the latency objectives instead. On stock vLLM telemetry only
    # an aborted request is seen, counted bad when 499 is.
    bad_codes: list[str] = Field(default_factory=lambda: ["5xx", "429"], min_length=1)

    @field_validator("bad_codes")
    @classmethod
    def _codes(cls, codes: list[str]) -> list[str]:
        wrong = [code for code in codes if not _CODE.match(code)]
        if wrong:
            raise ValueError(f"expected status codes such as 503 or classes such as 5xx, got {wrong}")
        return codes

    def code_regex(self) -> str:
        """The PromQL regex of the bad codes (``5..|429``)."""
        return "|".join(code.replace("x", ".") for code in self.bad_codes)

    def counts_client_cutoffs(self) -> bool:
        """Whether a client that went away (499) is a bad answer."""
        return re.fullmatch(self.code_regex(), "499") is not None


class LatencyObjective(BaseModel):
    """The share of requests whose latency must be within a threshold."""

    model_config = ConfigDict(extra="forbid")

    # ttft: arrival to the first streamed chunk; queue_wait: arrival to admission upstream;
    # request_duration: arrival to the last byte.
    indicator: Indicator
    # One of the indicator's histogram bucket bounds: a histogram counts requests only at those.
    threshold_s: float = Field(gt=0)
    # Share of requests that must be within threshold_s, e.g. 0.99.
    target: float = Field(gt=0, lt=1)

    @field_validator("threshold_s")
    @classmethod
    def _on_a_bound(cls, threshold_s: float, info: ValidationInfo) -> float:
        indicator = info.data.get("indicator")
        if indicator is None:  # refused itself
            return threshold_s
        bounds = HISTOGRAMS[indicator].gateway_bounds_s
        if threshold_s not in bounds:
            raise ValueError(f"{threshold_s:g} s is not a bucket bound of the gateway's {indicator} "
                             f"histogram ({_bounds_text(bounds)})")
        return threshold_s


class Objective(BaseModel):
    """One service's (or one model's) objectives over one window."""

    model_config = ConfigDict(extra="forbid")

    # Names the objective in the rules' ``slo`` label and in messages.
    name: str = Field(pattern=_NAME.pattern)
    # The gateway's service label; unset: every service, each judged on its own.
    service: str = Field("", pattern=_LABEL_VALUE.pattern)
    # The model label; unset: all of the service's models together.
    model: str = Field("", pattern=_LABEL_VALUE.pattern)
    # The error budget is counted over this long (28 days: four whole weeks, so each weekday counts
    # the same); at least the 3-day window of the slowest alert.
    window_s: float = Field(28 * DAY_S, ge=3 * DAY_S)
    # Unset (null): no availability objective.
    availability: Availability | None = Field(default_factory=Availability)
    # Latency objectives, each on one indicator; none by default.
    latency: list[LatencyObjective] = Field(default_factory=list)

    @field_validator("latency")
    @classmethod
    def _one_per_indicator(cls, latency: list[LatencyObjective]) -> list[LatencyObjective]:
        if repeated := _repeated(lat.indicator for lat in latency):
            raise ValueError(f"one objective per indicator (a second is another objective), repeated: "
                             f"{', '.join(repeated)}")
        return latency

    def targets(self) -> list[tuple[str, float]]:
        """``(key, target)`` of every objective it sets, availability first."""
        own = [("availability.target", self.availability.target)] if self.availability else []
        return own + [(f"latency.{j}.target", latency.target) for j, latency in enumerate(self.latency)]


def _repeated(values: Iterable[str]) -> list[str]:
    """The values that occur more than once, sorted."""
    seen = Counter(values)
    return sorted(v for v, n in seen.items() if n > 1)


def _default_objectives() -> list[Objective]:
    # The queue wait is the one latency that depends on neither the prompt nor the model: a second
    # is already a wait users notice, and it is a bucket bound of the gateway's and vLLM's histograms.
    return [Objective(name="requests", latency=[LatencyObjective(indicator="queue_wait", threshold_s=1.0,
                                                                  target=0.99)])]


class SloSettings(BaseModel):
    """Service level objectives, and the error-budget burn rates that page and open a ticket."""

    model_config = ConfigDict(extra="forbid")

    # Default: one objective per service, 99.9 % of answers not bad and 99 % of requests admitted
    # upstream within a second.
    objectives: list[Objective] = Field(default_factory=_default_objectives)
    # Burn rate (times the rate that spends the budget exactly over the window) at which a page
    # fires when both the 1 h and 5 min error ratios show it: 2 % of a 30-day budget in an hour.
    page_fast_burn: float = Field(14.4, gt=0)
    # The same over 6 h and 30 min (6: 5 % of a 30-day budget in 6 hours).
    page_slow_burn: float = Field(6.0, gt=0)
    # A ticket when both the 3-day and 6 h error ratios burn at least this fast: the budget would
    # be gone before the window ends.
    ticket_burn: float = Field(1.0, gt=0)

    @field_validator("objectives")
    @classmethod
    def _unique(cls, objectives: list[Objective]) -> list[Objective]:
        if repeated := _repeated(o.name for o in objectives):
            raise ValueError(f"objective names must be unique, repeated: {', '.join(repeated)}")
        return objectives

    @model_validator(mode="after")
    def _pages_can_fire(self) -> SloSettings:
        # A burn whose error ratio exceeds 1 needs more bad requests than there are: that alert is dead.
        burns = (("page_slow_burn", self.page_slow_burn), ("page_fast_burn", self.page_fast_burn))
        dead = [f"objectives.{i}.{key}: a budget of {1 - target:.4g} burnt {burn:g}× is more than every "
                f"request; lower {name} or raise the target"
                for i, objective in enumerate(self.objectives) for key, target in objective.targets()
                for name, burn in burns if burn * (1 - target) >= 1]
        if dead:
            raise ValueError("; ".join(dead))
        return self


    def unread_on(self, inputs: str) -> list[str]:
        """On stock inputs, one line per availability objective that nothing feeds: vLLM's only
        bad outcome is an aborted request, counted when client cut-offs (499) are."""
        if inputs != "stock":
            return []
        return [f"slos.objectives.{i}.availability: stock: vLLM reports no 5xx or 429, only aborted "
                "requests, counted when bad_codes holds 499: this objective sees no bad answer"
                for i, objective in enumerate(self.objectives)
                if objective.availability is not None and not objective.availability.counts_client_cutoffs()]

    def threshold_problems(self, inputs: str) -> list[str]:
        """On stock or mixed inputs, one line per latency threshold that is not a bucket bound of
        vLLM's histogram too (the gateway's bounds are checked with the section)."""
        if inputs not in ("stock", "mixed"):
            return []
        problems = []
        for i, objective in enumerate(self.objectives):
            for j, latency in enumerate(objective.latency):
                bounds = HISTOGRAMS[latency.indicator].vllm_bounds_s
                if latency.threshold_s not in bounds:
                    problems.append(
                        f"slos.objectives.{i}.latency.{j}.threshold_s: {latency.threshold_s:g} s is not a "
                        f"bucket bound of vLLM's {latency.indicator} histogram, which analyzer.inputs: "
                        f"{inputs} reads ({_bounds_text(bounds)})")
        return problems
