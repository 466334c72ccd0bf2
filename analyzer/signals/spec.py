"""What a signal is: its query, the layer it speaks for, and how it is judged (the detectors its
kind implies, or those it lists). The signals themselves are in ``analyzer/signals/catalogue.py``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from analyzer.signals.query import Expr, Increase, Relabel
from oximeter.vocabulary import Layer

Kind = Literal["latency", "ratio", "counter_growth", "gauge", "hit_rate", "trend", "peer", "presence"]

# A latency p99 must clear its baseline by this many robust scales (the recent IQR as σ) as well
# as by ``ratio`` and ``min_delta``: 3 σ, the usual "outside the noise" margin.
LATENCY_NOISE_Z = 3.0



def traffic_name(signal: str) -> str:
    """The name a signal's minimum-traffic guard is fetched (and snapshotted) under."""
    return f"{signal}:traffic"


def _check_promql(promql: str, expr: Expr | None) -> None:
    """A query given both ways must be the same query."""
    if expr is not None and promql != expr.promql:
        raise ValueError(f"promql {promql!r} is not its expression's {expr.promql!r}")


class TrafficGuard(BaseModel):
    """Detections count only where ``promql`` (same entity labels) is at least ``minimum``."""

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)

    promql: str
    minimum: float = Field(ge=0)
    # The same query as an expression (analyzer/signals/query.py), for replay; None: PromQL only.
    expr: Expr | None = Field(None, exclude=True)

    @classmethod
    def of(cls, expr: Expr, minimum: float) -> TrafficGuard:
        """The guard on ``expr``, its PromQL rendered from it."""
        return cls(promql=expr.promql, minimum=minimum, expr=expr)

    @model_validator(mode="after")
    def _same_query(self) -> TrafficGuard:
        _check_promql(self.promql, self.expr)
        return self

    @property
    def window_s(self) -> float | None:
        """The window the guard counts over (its increase's, through a relabelling), or None when
        its expression is not such a count."""
        expr = self.expr.inner if isinstance(self.expr, Relabel) else self.expr
        return expr.window_s if isinstance(expr, Increase) else None


class DetectorSpec(BaseModel):
    """One detector a signal runs: a registered ``type`` (``analyzer/detection/detectors/__init__.py``) and
    its parameters beside it, e.g. ``{type: threshold, threshold: 85, direction: up}``."""

    model_config = ConfigDict(extra="allow", frozen=True)

    type: str

    @property
    def params(self) -> dict[str, Any]:
        """Everything but ``type``: the detector's fields."""
        return dict(self.model_extra or {})


def _d(type_name: str, **params: Any) -> DetectorSpec:
    return DetectorSpec.model_validate({"type": type_name, **params})


class SignalSpec(BaseModel):
    """One named signal and how it is judged."""

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)

    name: str
    layer: Layer
    kind: Kind
    promql: str  # raw fallback: works on any PromQL store
    # The query as an expression (analyzer/signals/query.py): ``promql`` is rendered from it, and the frame
    # source evaluates it on replayed history. None: a PromQL-only signal, which replay leaves empty.
    expr: Expr | None = Field(None, exclude=True)
    record: str | None = None  # recording rule, preferred when the store has it
    direction: Literal["up", "down", "both"] = "up"  # "both": peer and robust-deviation kinds only
    entity_labels: tuple[str, ...] = ("node",)
    min_traffic: TrafficGuard | None = None
    # A ratio whose guard counts its denominator over the ratio's own window (requests a minute):
    # where that window holds fewer than the guard asks, the ratio over it and as many windows
    # before it as it takes to hold them, up to ``widen_s`` in all, so that a lightly loaded node's
    # error share is judged over enough requests instead of not at all.
    widen_s: float | None = Field(None, gt=0)
    threshold: float | None = None  # static limit (also the fallback with < 1 day of history)
    ratio: float | None = None  # × baseline; None: no baseline comparison
    min_delta: float = Field(0.0, ge=0)  # absolute margin over the baseline
    increase: float | None = None  # counter_growth: absolute increase in its window
    window_s: float = Field(300.0, gt=0)  # counter_growth / trend window
    capacity: float | None = None  # trend: the level at which the resource is full
    peer_labels: tuple[str, ...] = ()  # peer: labels that make series peers (e.g. model)
    for_s: float = Field(120.0, ge=0)  # persistence window (k-of-n carries the "for")
    min_samples: int = Field(3, ge=1)
    clear_s: float | None = None
    cooldown_s: float = Field(0.0, ge=0)
    # False: a symptom that is only context (evidence and impact in an incident another signal
    # opened), never a reason to open one by itself.
    opens_incident: bool = True
    # How a gauge without threshold or ratio is judged: against its robust baseline, or by how
    # unlike its recent shape is to its past ones (for series of unknown meaning, e.g. exports).
    generic: Literal["robust_deviation", "neighbour_surprise"] = "robust_deviation"
    unit: str = ""
    description: str = ""
    # The detectors it runs (any of them opening an event opens one); empty: its kind's defaults,
    # formed from the fields above (KIND_DETECTORS).
    detectors: tuple[DetectorSpec, ...] = ()

    def traffic_spec(self) -> SignalSpec | None:
        """The minimum-traffic guard as a signal of its own (``<name>:traffic``), so any source
        can fetch it like a signal."""
        if self.min_traffic is None:
            return None
        return SignalSpec(name=traffic_name(self.name), layer=self.layer, kind="gauge",
                          promql=self.min_traffic.promql, expr=self.min_traffic.expr,
                          entity_labels=self.entity_labels)

    @classmethod
    def of(cls, expr: Expr, **fields: Any) -> SignalSpec:
        """The signal querying ``expr``, its PromQL rendered from it."""
        return cls(promql=expr.promql, expr=expr, **fields)

    @model_validator(mode="after")
    def _direction_fits_kind(self) -> SignalSpec:
        _check_promql(self.promql, self.expr)
        two_sided = self.kind == "peer" or (self.kind in ("latency", "ratio", "gauge")
                                            and self.threshold is None and self.ratio is None)
        if self.direction == "both" and not two_sided:
            raise ValueError("direction 'both' needs kind 'peer', or a gauge without threshold and ratio")
        if self.widen_s is not None:
            self.guard_window_s()  # a ValueError says what widen_s needs
        return self

    def guard_window_s(self) -> float:
        """The window the minimum-traffic guard counts over, which ``widen_s`` steps back by."""
        window = self.min_traffic.window_s if self.min_traffic is not None else None
        if self.kind != "ratio" or window is None:
            raise ValueError("widen_s needs a ratio whose min_traffic counts its requests as an increase "
                             "over the ratio's window")
        return window

    @property
    def query(self) -> str:
        """The recording rule when there is one, else the raw PromQL."""
        return self.record or self.promql

    def detector_specs(self) -> tuple[DetectorSpec, ...]:
        """The detectors listed, else the kind's defaults."""
        return self.detectors or tuple(KIND_DETECTORS[self.kind](self))

def _level_detectors(spec: SignalSpec) -> list[DetectorSpec]:
    """A level (latency, ratio, gauge): its static threshold and/or its ratio to its baseline;
    with neither, the ``generic`` judge of a series of unknown meaning."""
    one_sided = "down" if spec.direction == "down" else "up"
    out = []
    if spec.threshold is not None:
        out.append(_d("threshold", threshold=spec.threshold, direction=one_sided))
    if spec.ratio is not None:
        # A latency quantile swings by itself: judged against its own recent spread too.
        noise_z = LATENCY_NOISE_Z if spec.kind == "latency" else 0.0
        out.append(_d("baseline_ratio", ratio=spec.ratio, direction=one_sided, min_delta=spec.min_delta,
                      noise_z=noise_z))
    return out or [_d(spec.generic, direction=spec.direction)]


# Each kind's default detectors, from the signal's fields (a signal's ``detectors`` replace them).
KIND_DETECTORS: dict[str, Callable[[SignalSpec], list[DetectorSpec]]] = {
    "latency": _level_detectors,
    "ratio": _level_detectors,
    "gauge": _level_detectors,
    "counter_growth": lambda s: [_d("counter_growth", window_s=s.window_s, min_increase=s.increase,
                                    ratio=s.ratio)],
    "hit_rate": lambda s: [_d("drop", min_drop=s.min_delta or 0.15, expected=s.threshold)],
    "trend": lambda s: [_d("trend", window_s=s.window_s, capacity=s.capacity)],
    "peer": lambda s: [_d("peer_outlier", direction=s.direction, min_delta=s.min_delta)],
    # threshold: the values are sample ages in seconds, and this is the oldest acceptable.
    "presence": lambda s: [_d("vanished", max_age_s=s.threshold)],
}
