"""A signal's query as an expression, written once: it renders its PromQL (what the Prometheus
source asks and the generated recording rules hold) and evaluates the same on replay frames.

A handful of composable, vectorised operations — select, aggregate ``without (instance, job, …)``,
reset-safe ``increase``/``rate``, ``deriv``, ``*_over_time``, ``histogram_quantile`` with Prometheus's
interpolation, ratios, ``or``, ``label_replace`` and the age of a series — enough for every
catalogue signal. A query given as plain PromQL (a signal added in the config) is not replayed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np
import pandas as pd

from analyzer.signals.raw import Labeled, RawStore
from analyzer.signals.rolling import counter_increase, rolling_ols

ALWAYS_DROPPED = ("instance", "job")
How = Literal["sum", "max", "avg"]


class Expr:
    """One node of a query: its PromQL text, and its evaluation on a raw store's grid."""

    @property
    def promql(self) -> str:
        """The PromQL this node stands for."""
        raise NotImplementedError

    def evaluate(self, store: RawStore) -> Labeled:
        """The derived series, as labelled columns on the store's grid."""
        raise NotImplementedError


def duration(seconds: float) -> str:
    """A PromQL range: ``1h``, ``5m`` or ``30s``."""
    whole = int(seconds)
    if whole != seconds:
        raise ValueError(f"a PromQL range needs whole seconds, not {seconds}")
    if whole % 3600 == 0:
        return f"{whole // 3600}h"
    return f"{whole // 60}m" if whole % 60 == 0 else f"{whole}s"


def _without(drop: tuple[str, ...]) -> str:
    return ", ".join((*ALWAYS_DROPPED, *drop))


def aggregate(data: Labeled, drop: tuple[str, ...], how: How) -> Labeled:
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


def _empty(store: RawStore) -> Labeled:
    return Labeled(np.zeros((len(store.index), 0), np.float32), ())


@dataclass(frozen=True)
class Selector(Expr):
    """``name{match}``. A matcher's value is ``"v"`` (equal), ``"~re"`` (``=~``) or ``"!v"`` (``!=``)."""

    name: str
    match: tuple[tuple[str, str], ...] = ()

    @property
    def promql(self) -> str:
        """``name`` with its matchers."""
        ops = {"~": "=~", "!": "!="}
        matchers = [f'{k}{ops[v[0]]}"{v[1:]}"' if v[:1] in ops else f'{k}="{v}"' for k, v in self.match]
        return f"{self.name}{{{','.join(matchers)}}}" if matchers else self.name

    def evaluate(self, store: RawStore) -> Labeled:
        """The raw series."""
        return store.select(self.name, dict(self.match))


def select(name: str, match: Mapping[str, str] | None = None) -> Selector:
    """A selector from a matcher map."""
    return Selector(name, tuple((match or {}).items()))


@dataclass(frozen=True)
class Aggregate(Expr):
    """``<how> without (instance, job, *drop) (inner)``."""

    inner: Expr
    how: How = "max"
    drop: tuple[str, ...] = ()

    @property
    def promql(self) -> str:
        """The aggregation around its operand."""
        return f"{self.how} without ({_without(self.drop)}) ({self.inner.promql})"

    def evaluate(self, store: RawStore) -> Labeled:
        """Group and aggregate."""
        return aggregate(self.inner.evaluate(store), self.drop, self.how)


def gauge(name: str, match: Mapping[str, str] | None = None, how: How = "max",
          drop: tuple[str, ...] = ()) -> Aggregate:
    """``<how> without (instance, job, *drop) (name{match})``: a gauge per entity."""
    return Aggregate(select(name, match), how, drop)


@dataclass(frozen=True)
class Increase(Expr):
    """``sum without (instance, job, *drop) (increase(series[window]))``, or ``rate`` when
    ``per_second``."""

    series: Selector
    window_s: float
    drop: tuple[str, ...] = ()
    per_second: bool = False

    @property
    def promql(self) -> str:
        """The summed increase (or rate)."""
        fn = "rate" if self.per_second else "increase"
        return f"sum without ({_without(self.drop)}) ({fn}({self.series.promql}[{duration(self.window_s)}]))"

    def evaluate(self, store: RawStore) -> Labeled:
        """Reset-safe increase per raw series, then summed."""
        raw = self.series.evaluate(store)
        inc = counter_increase(_frame(store, raw), self.window_s).to_numpy()
        if self.per_second:
            inc = inc / self.window_s
        return aggregate(Labeled(inc, raw.labels), self.drop, "sum")


def increase(name: str, window_s: float, match: Mapping[str, str] | None = None,
             drop: tuple[str, ...] = (), *, per_second: bool = False) -> Increase:
    """A counter's summed increase (``per_second``: rate) over ``window_s``."""
    return Increase(select(name, match), window_s, drop, per_second)


@dataclass(frozen=True)
class Deriv(Expr):
    """``deriv(series[window])``: each series' least-squares slope per second over the trailing
    window (absent until the window is full)."""

    series: Selector
    window_s: float

    @property
    def promql(self) -> str:
        """The slope of the range."""
        return f"deriv({self.series.promql}[{duration(self.window_s)}])"

    def evaluate(self, store: RawStore) -> Labeled:
        """Rolling least squares per raw series, in units per second."""
        data = self.series.evaluate(store)
        window = max(2, round(self.window_s / store.step_s))
        slope, _ = rolling_ols(data.values.astype(np.float64), window)
        return Labeled((slope / store.step_s).astype(np.float32), data.labels)


@dataclass(frozen=True)
class OverTime(Expr):
    """``max_over_time(series[window])`` (q=1), ``min_over_time`` (q=0), or
    ``quantile_over_time(q, …)`` between."""

    series: Selector
    window_s: float
    q: float = 1.0

    @property
    def promql(self) -> str:
        """The over-time function of the range."""
        rng = f"{self.series.promql}[{duration(self.window_s)}]"
        if self.q >= 1.0:
            return f"max_over_time({rng})"
        return f"min_over_time({rng})" if self.q <= 0.0 else f"quantile_over_time({self.q}, {rng})"

    def evaluate(self, store: RawStore) -> Labeled:
        """Rolling over the trailing window of each series."""
        data = self.series.evaluate(store)
        window = max(1, round(self.window_s / store.step_s))
        roll = _frame(store, data).rolling(window, min_periods=1)
        out = roll.max() if self.q >= 1.0 else roll.min() if self.q <= 0.0 else roll.quantile(self.q)
        return Labeled(out.to_numpy(np.float32), data.labels)


@dataclass(frozen=True)
class Or(Expr):
    """``left or right``: every series of ``left``, and those of ``right`` whose label set
    ``left`` lacks (per series over the whole store, not per step: a fallback for a metric that
    an older exporter names differently, not a blend of both)."""

    left: Expr
    right: Expr

    @property
    def promql(self) -> str:
        """Both sides."""
        return f"{self.left.promql} or {self.right.promql}"

    def evaluate(self, store: RawStore) -> Labeled:
        """The union by label set."""
        a, b = self.left.evaluate(store), self.right.evaluate(store)
        seen = {tuple(sorted(lab.items())) for lab in a.labels}
        extra = [i for i, lab in enumerate(b.labels) if tuple(sorted(lab.items())) not in seen]
        if not extra:
            return a
        return Labeled(np.concatenate([a.values, b.values[:, extra]], axis=1),
                       (*a.labels, *(b.labels[i] for i in extra)))


def _counts(buckets: Expr) -> Expr:
    """The same buckets as increases rather than rates: the quantile is the same, without a
    division (and its rounding) per bucket."""
    if isinstance(buckets, Increase):
        return replace(buckets, per_second=False)
    if isinstance(buckets, Or):
        return Or(_counts(buckets.left), _counts(buckets.right))
    return buckets


@dataclass(frozen=True)
class HistogramQuantile(Expr):
    """``histogram_quantile(q, buckets)``, ``buckets`` per ``le`` (see :func:`p99`)."""

    q: float
    buckets: Expr

    @property
    def promql(self) -> str:
        """The quantile of the bucket rates."""
        return f"histogram_quantile({self.q}, {self.buckets.promql})"

    def evaluate(self, store: RawStore) -> Labeled:
        """Prometheus's bucket interpolation, vectorised over time × series."""
        buckets = _counts(self.buckets).evaluate(store)
        groups: dict[tuple[tuple[str, str], ...], list[tuple[float, int]]] = {}
        for col, lab in enumerate(buckets.labels):
            key = tuple(sorted((k, v) for k, v in lab.items() if k != "le"))
            groups.setdefault(key, []).append((float(lab.get("le", "inf")), col))
        if not groups:
            return _empty(store)
        bounds = sorted({le for cols in groups.values() for le, _ in cols})
        cube = np.full((len(store.index), len(groups), len(bounds)), np.nan, dtype=np.float64)
        where = {le: i for i, le in enumerate(bounds)}
        for g, cols in enumerate(groups.values()):
            for le, col in cols:
                cube[:, g, where[le]] = buckets.values[:, col]
        return Labeled(bucket_quantile(self.q, np.asarray(bounds), cube).astype(np.float32),
                       tuple(dict(k) for k in groups))


def bucket_rate(histogram: str, window_s: float = 300) -> Increase:
    """``sum without (instance, job) (rate(<histogram>_bucket[window]))``."""
    return increase(f"{histogram}_bucket", window_s, per_second=True)


def p99(histogram: str, window_s: float = 300) -> HistogramQuantile:
    """The p99 of a histogram over ``window_s``."""
    return HistogramQuantile(0.99, bucket_rate(histogram, window_s))


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
class Ratio(Expr):
    """``num / den`` matched on identical label sets, or with ``on`` set
    ``num / on (…) group_left den``: each ``num`` column by the one ``den`` column that shares
    those labels (a process's RSS by its node's memory)."""

    num: Expr
    den: Expr
    on: tuple[str, ...] | None = None

    @property
    def promql(self) -> str:
        """The division, with its matching."""
        op = "/" if self.on is None else f"/ on ({', '.join(self.on)}) group_left"
        return f"{self.num.promql} {op} {self.den.promql}"

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
            return _empty(store)
        ia, ib = (list(x) for x in zip(*pairs, strict=True))
        with np.errstate(invalid="ignore", divide="ignore"):
            out = a.values[:, ia] / b.values[:, ib]
        return Labeled(out.astype(np.float32), tuple(a.labels[i] for i in ia))


@dataclass(frozen=True)
class Relabel(Expr):
    """``label_replace(inner, "model", "$1", "model_name", "(.*)")``: copy one label to another
    (vLLM's ``model_name`` to the ``model`` the rest of the stack uses)."""

    inner: Expr
    source: str = "model_name"
    target: str = "model"

    @property
    def promql(self) -> str:
        """The label_replace call."""
        return f'label_replace({self.inner.promql}, "{self.target}", "$1", "{self.source}", "(.*)")'

    def evaluate(self, store: RawStore) -> Labeled:
        """Copy the label where present."""
        data = self.inner.evaluate(store)
        labels = tuple({**lab, self.target: lab[self.source]} if self.source in lab else lab
                       for lab in data.labels)
        return Labeled(data.values, labels)


@dataclass(frozen=True)
class Age(Expr):
    """``time() - <how> without (instance, job) (timestamp(series))``: seconds since each entity's
    newest sample, absent once it is older than the lookback (as Prometheus answers for data
    without staleness markers)."""

    series: Selector
    how: How = "max"
    lookback_s: float = 300.0

    @property
    def promql(self) -> str:
        """Now minus the newest sample's time."""
        return f"time() - {self.how} without ({_without(())}) (timestamp({self.series.promql}))"

    def evaluate(self, store: RawStore) -> Labeled:
        """Row time minus the time of the last non-missing sample."""
        data = aggregate(self.series.evaluate(store), (), self.how)
        times = (store.index.as_unit("s").asi8 - store.index[0].as_unit("s").value).astype(np.float64)
        seen = pd.DataFrame(np.where(np.isnan(data.values), np.nan, times[:, None]), index=store.index)
        age = times[:, None] - seen.ffill().to_numpy()
        age = np.where(age > self.lookback_s, np.nan, age)
        return Labeled(age.astype(np.float32), data.labels)
