"""How the frame source derives each catalogue signal from raw series, the way its PromQL does.

A handful of composable, vectorised operations — select-and-aggregate, reset-safe increase and
rate, over-time quantiles, ``histogram_quantile`` with Prometheus's interpolation, ratios and
``label_replace`` — enough to reproduce the catalogue's recording rules on replay frames.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, Protocol

import numpy as np
import pandas as pd

from analyzer.detectors.counter import counter_increase
from analyzer.detectors.trend import rolling_ols
from analyzer.sources.raw import Labeled, RawStore
from oximeter.xids import xid_pattern

ALWAYS_DROPPED = ("instance", "job")


class Recipe(Protocol):
    """Evaluates to labelled columns on the store's grid."""

    def evaluate(self, store: RawStore) -> Labeled:
        """The derived series."""
        ...


def aggregate(data: Labeled, drop: tuple[str, ...], how: Literal["sum", "max", "avg"]) -> Labeled:
    """``<how> without (instance, job, *drop)``: columns grouped by their remaining labels."""
    if not data.labels:
        return data
    gone = set(ALWAYS_DROPPED) | set(drop)
    kept = [{k: v for k, v in lab.items() if k not in gone} for lab in data.labels]
    keys = [tuple(sorted(lab.items())) for lab in kept]
    _, groups = np.unique(np.array([repr(k) for k in keys]), return_inverse=True)
    order = np.argsort(groups, kind="stable")
    starts = np.flatnonzero(np.r_[True, np.diff(groups[order]) != 0])
    sorted_values = data.values[:, order]
    present = np.add.reduceat(~np.isnan(sorted_values), starts, axis=1)
    if how == "max":
        out = np.fmax.reduceat(sorted_values, starts, axis=1)
    else:
        out = np.add.reduceat(np.nan_to_num(sorted_values), starts, axis=1)
        if how == "avg":
            out = out / np.maximum(present, 1)
    out = np.where(present > 0, out, np.nan).astype(np.float32)
    first = order[starts]
    return Labeled(out, tuple(kept[i] for i in first))


def _frame(store: RawStore, data: Labeled) -> pd.DataFrame:
    return pd.DataFrame(data.values, index=store.index)


@dataclass(frozen=True)
class Gauge:
    """``<agg> without (instance, job, *drop) (name{match})``."""

    name: str
    match: Mapping[str, str] = field(default_factory=dict)
    agg: Literal["sum", "max", "avg"] = "max"
    drop: tuple[str, ...] = ()

    def evaluate(self, store: RawStore) -> Labeled:
        """Select and aggregate."""
        return aggregate(store.select(self.name, self.match), self.drop, self.agg)


@dataclass(frozen=True)
class Increase:
    """``sum without (…) (increase(name{match}[window]))``, or ``rate`` when ``per_second``."""

    name: str
    window_s: float
    match: Mapping[str, str] = field(default_factory=dict)
    drop: tuple[str, ...] = ()
    per_second: bool = False

    def evaluate(self, store: RawStore) -> Labeled:
        """Reset-safe increase per raw series, then summed."""
        raw = store.select(self.name, self.match)
        inc = counter_increase(_frame(store, raw), self.window_s).to_numpy()
        if self.per_second:
            inc = inc / self.window_s
        return aggregate(Labeled(inc, raw.labels), self.drop, "sum")


@dataclass(frozen=True)
class Deriv:
    """``max without (…) (deriv(name[window]))``: each series' least-squares slope per second over
    the trailing window (absent until the window is full), then the largest per entity."""

    name: str
    window_s: float

    def evaluate(self, store: RawStore) -> Labeled:
        """Rolling least squares per raw series, then aggregated."""
        raw = store.select(self.name)
        window = max(2, round(self.window_s / store.step_s))
        slope, _ = rolling_ols(raw.values.astype(np.float64), window)
        return aggregate(Labeled((slope / store.step_s).astype(np.float32), raw.labels), (), "max")


@dataclass(frozen=True)
class OverTime:
    """``<q>_over_time(inner[window])``: a rolling quantile (q=1: max_over_time, q=0:
    min_over_time) of each series."""

    inner: Recipe
    window_s: float
    q: float = 1.0

    def evaluate(self, store: RawStore) -> Labeled:
        """Rolling over the trailing window."""
        data = self.inner.evaluate(store)
        window = max(1, round(self.window_s / store.step_s))
        roll = _frame(store, data).rolling(window, min_periods=1)
        out = roll.max() if self.q >= 1.0 else roll.min() if self.q <= 0.0 else roll.quantile(self.q)
        return Labeled(out.to_numpy(np.float32), data.labels)


@dataclass(frozen=True)
class HistogramQuantile:
    """``histogram_quantile(q, sum without (…) (rate(name_bucket[window])))``."""

    q: float
    name: str
    window_s: float
    drop: tuple[str, ...] = ()

    def evaluate(self, store: RawStore) -> Labeled:
        """Prometheus's bucket interpolation, vectorised over time × series."""
        buckets = Increase(f"{self.name}_bucket", self.window_s, drop=self.drop).evaluate(store)
        groups: dict[tuple[tuple[str, str], ...], list[tuple[float, int]]] = {}
        for col, lab in enumerate(buckets.labels):
            key = tuple(sorted((k, v) for k, v in lab.items() if k != "le"))
            groups.setdefault(key, []).append((float(lab.get("le", "inf")), col))
        if not groups:
            return Labeled(np.zeros((len(store.index), 0), np.float32), ())
        bounds = sorted({le for cols in groups.values() for le, _ in cols})
        cube = np.full((len(store.index), len(groups), len(bounds)), np.nan, dtype=np.float64)
        where = {le: i for i, le in enumerate(bounds)}
        for g, cols in enumerate(groups.values()):
            for le, col in cols:
                cube[:, g, where[le]] = buckets.values[:, col]
        return Labeled(bucket_quantile(self.q, np.asarray(bounds), cube).astype(np.float32),
                       tuple(dict(k) for k in groups))


def bucket_quantile(q: float, bounds: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Quantile from cumulative bucket counts (… × buckets, last bound +Inf) as Prometheus does:
    linear within the bucket, the highest finite bound when it falls in +Inf, NaN without data."""
    counts = np.maximum.accumulate(np.nan_to_num(counts), axis=-1)  # buckets must be monotonic
    total = counts[..., -1]
    rank = q * total
    idx = np.argmax(counts >= rank[..., None], axis=-1)
    upper = bounds[idx]
    lower = np.where(idx > 0, bounds[np.maximum(idx - 1, 0)], np.where(bounds[0] > 0, 0.0, bounds[0]))
    c_hi = np.take_along_axis(counts, idx[..., None], axis=-1)[..., 0]
    below = np.take_along_axis(counts, np.maximum(idx - 1, 0)[..., None], axis=-1)[..., 0]
    c_lo = np.where(idx > 0, below, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        inside = lower + (upper - lower) * (rank - c_lo) / (c_hi - c_lo)
    finite_top = bounds[-2] if len(bounds) > 1 else np.nan
    out = np.where(np.isinf(upper), finite_top, np.where(c_hi > c_lo, inside, upper))
    return np.where(total > 0, out, np.nan)


@dataclass(frozen=True)
class Ratio:
    """``num / den`` matched on identical label sets, or with ``on`` set
    ``num / on (…) group_left den``: each ``num`` column by the one ``den`` column that shares
    those labels (a process's RSS by its node's memory)."""

    num: Recipe
    den: Recipe
    on: tuple[str, ...] | None = None

    def _key(self, labels: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
        kept = labels.items() if self.on is None else ((k, v) for k, v in labels.items() if k in self.on)
        return tuple(sorted(kept))

    def evaluate(self, store: RawStore) -> Labeled:
        """Element-wise division of the matching columns."""
        a, b = self.num.evaluate(store), self.den.evaluate(store)
        keys_b = {self._key(lab): i for i, lab in enumerate(b.labels)}
        keys_a = [self._key(lab) for lab in a.labels]
        pairs = [(i, keys_b[k]) for i, k in enumerate(keys_a) if k in keys_b]
        if not pairs:
            return Labeled(np.zeros((len(store.index), 0), np.float32), ())
        ia, ib = (list(x) for x in zip(*pairs, strict=True))
        with np.errstate(invalid="ignore", divide="ignore"):
            out = a.values[:, ia] / b.values[:, ib]
        return Labeled(out.astype(np.float32), tuple(a.labels[i] for i in ia))


@dataclass(frozen=True)
class Relabel:
    """``label_replace(inner, "model", "$1", "model_name", "(.*)")``: copy one label to another."""

    inner: Recipe
    source: str = "model_name"
    target: str = "model"

    def evaluate(self, store: RawStore) -> Labeled:
        """Copy the label where present."""
        data = self.inner.evaluate(store)
        labels = tuple({**lab, self.target: lab[self.source]} if self.source in lab else lab
                       for lab in data.labels)
        return Labeled(data.values, labels)


@dataclass(frozen=True)
class Age:
    """``time() - timestamp(inner)``: seconds since each series' newest sample, absent once it is
    older than the store's lookback (as Prometheus answers for data without staleness markers)."""

    inner: Recipe
    lookback_s: float = 300.0

    def evaluate(self, store: RawStore) -> Labeled:
        """Row time minus the time of the last non-missing sample."""
        data = self.inner.evaluate(store)
        times = (store.index.as_unit("s").asi8 - store.index[0].as_unit("s").value).astype(np.float64)
        seen = pd.DataFrame(np.where(np.isnan(data.values), np.nan, times[:, None]), index=store.index)
        age = times[:, None] - seen.ffill().to_numpy()
        age = np.where(age > self.lookback_s, np.nan, age)
        return Labeled(age.astype(np.float32), data.labels)


def _hits(result: str) -> Mapping[str, str]:
    return {"result": result}


# Each mirrors the signal's recording rule (alert_rules/*.rules.yml) or raw PromQL fallback.
RECIPES: dict[str, Recipe] = {
    "queue_wait_p99": HistogramQuantile(0.99, "oximeter_queue_wait_seconds", 300),
    "queue_length": OverTime(Gauge("oximeter_queue_length"), 60),
    "queue_limit_ratio": Ratio(Gauge("oximeter_queue_length"), Gauge("oximeter_queue_limit")),
    "external_queue_growth": Deriv("oximeter_external_queue_length", 600),
    "rejected_429_ratio": Ratio(Increase("oximeter_requests_total", 60, {"code": "429"}, ("code",)),
                                Increase("oximeter_requests_total", 60, drop=("code",))),
    "ttft_p99": HistogramQuantile(0.99, "oximeter_time_to_first_token_seconds", 300),
    "request_p99": HistogramQuantile(0.99, "oximeter_request_duration_seconds", 300),
    "error_504_ratio": Ratio(Increase("oximeter_requests_total", 60, {"code": "504"}, ("code",)),
                             Increase("oximeter_requests_total", 60, drop=("code",))),
    "retry_ratio": Ratio(Increase("oximeter_retried_requests_total", 300),
                         Increase("oximeter_requests_total", 300, drop=("code",))),
    "gpu_temperature": Gauge("oximeter_gpu_temperature_celsius"),
    "gpu_sm_clock_ratio": Ratio(Gauge("oximeter_gpu_sm_clock_hertz"),
                                Gauge("oximeter_gpu_sm_clock_max_hertz")),
    "gpu_utilization_p95": OverTime(Gauge("oximeter_gpu_utilization_ratio"), 300, q=0.95),
    "ecc_corrected_increase": Increase("oximeter_gpu_ecc_errors_total", 300, {"kind": "corrected"},
                                       ("kind",)),
    "ecc_corrected_burn": Increase("oximeter_gpu_ecc_errors_total", 3600, {"kind": "corrected"}, ("kind",)),
    "ecc_uncorrected_increase": Increase("oximeter_gpu_ecc_errors_total", 300, {"kind": "uncorrected"},
                                         ("kind",)),
    "xid_paging": Increase("oximeter_gpu_xid_errors_total", 300, {"xid": f"~{xid_pattern()}"}),
    "pcie_replay_increase": Increase("oximeter_gpu_pcie_replay_total", 300),
    "nvlink_errors_increase": Increase("oximeter_gpu_nvlink_errors_total", 300, drop=("kind",)),
    "engine_itl_peer": Relabel(HistogramQuantile(0.99, "vllm:inter_token_latency_seconds", 300)),
    "gpu_utilization_peer": OverTime(Gauge("oximeter_gpu_utilization_ratio"), 300, q=0.5),
    "gpu_series_vanished": Age(Gauge("oximeter_gpu_up")),
    "gpu_down": Gauge("oximeter_gpu_up"),
    "kv_cache_usage": Relabel(Gauge("vllm:kv_cache_usage_perc")),
    "preemption_rate": Relabel(Increase("vllm:num_preemptions_total", 300, per_second=True)),
    "prefix_cache_hit_ratio": Relabel(Ratio(
        Increase("vllm:prefix_cache_hits_total", 300, per_second=True),
        Increase("vllm:prefix_cache_queries_total", 300, per_second=True))),
    "empty_output_ratio": Ratio(Increase("oximeter_empty_completions_total", 300),
                                Increase("oximeter_completions_total", 300, drop=("finish_reason",))),
    "engine_ttft_p99": Relabel(HistogramQuantile(0.99, "vllm:time_to_first_token_seconds", 300)),
    "process_rss_trend": Ratio(Gauge("oximeter_process_resident_memory_bytes"),
                               Gauge("oximeter_host_memory_total_bytes"), on=("node",)),
    "gpu_memory_trend": Ratio(Gauge("oximeter_gpu_memory_used_bytes"),
                              Gauge("oximeter_gpu_memory_total_bytes")),
    "dependency_latency_p99": HistogramQuantile(0.99, "oximeter_dependency_duration_seconds", 300),
    # Minimum-traffic guards (SignalSpec.traffic_spec): the same PromQL as each min_traffic.
    "queue_wait_p99:traffic": Increase("oximeter_queue_wait_seconds_count", 300),
    "ttft_p99:traffic": Increase("oximeter_time_to_first_token_seconds_count", 300),
    "request_p99:traffic": Increase("oximeter_request_duration_seconds_count", 300),
    "engine_itl_peer:traffic": Relabel(Increase("vllm:time_to_first_token_seconds_count", 300)),
    "engine_ttft_p99:traffic": Relabel(Increase("vllm:time_to_first_token_seconds_count", 300)),
    "gpu_sm_clock_ratio:traffic": Gauge("oximeter_gpu_clock_event_active", {"reason": "!idle"},
                                        drop=("reason",)),
    "empty_output_ratio:traffic": Increase("oximeter_completions_total", 300, drop=("finish_reason",)),
    "external_queue_growth:traffic": OverTime(Gauge("oximeter_external_queue_length"), 300, q=0.0),
    "retry_ratio:traffic": Increase("oximeter_requests_total", 300, drop=("code",)),
    "rejected_429_ratio:traffic": Increase("oximeter_requests_total", 60, drop=("code",)),
    "error_504_ratio:traffic": Increase("oximeter_requests_total", 60, drop=("code",)),
    "cache_hit_ratio:traffic": Increase("oximeter_cache_requests_total", 300, drop=("result",),
                                        per_second=True),
    "cache_hit_ratio": Ratio(
        Increase("oximeter_cache_requests_total", 300, _hits("hit"), ("result",), True),
        Increase("oximeter_cache_requests_total", 300, drop=("result",), per_second=True)),
}
