"""A number an exporter writes as a label of an info series, read as that series' value.

vLLM reports its engine's KV-cache pool only as the ``num_gpu_blocks`` label of
``vllm:cache_config_info`` (a gauge fixed at 1). PromQL cannot turn a label into a value, so the
query asks for the info series as it is and the analyzer reads the label: :class:`LabelValue`
does it on a replay's raw history, :func:`as_values` on a Prometheus answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from analyzer.signals.frame import SeriesFrame, series_key
from analyzer.signals.query import Expr, aggregate
from analyzer.signals.raw import Labeled, RawStore
from analyzer.signals.spec import SignalSpec


def label_number(labels: Mapping[str, str], label: str) -> float:
    """``label``'s value as a number; NaN where it is absent or not a number (vLLM writes an
    unset field as ``"None"``)."""
    try:
        return float(labels[label])
    except (KeyError, ValueError):
        return float("nan")


@dataclass(frozen=True)
class LabelValue(Expr):
    """``inner`` (an info series), each sample's value replaced by the number in ``label``, which
    leaves the series' labels (the value is not the series' name)."""

    inner: Expr
    label: str

    @property
    def promql(self) -> str:
        """The info series' own query: the label is read from the answer."""
        return self.inner.promql

    def evaluate(self, store: RawStore) -> Labeled:
        """The info series with the label's number where it has a sample."""
        data = self.inner.evaluate(store)
        numbers = np.array([label_number(la, self.label) for la in data.labels], dtype=np.float32)
        values = np.where(np.isfinite(data.values), numbers[None, :], np.nan).astype(np.float32)
        # Two sizes of one engine's pool (it restarted with another): one series, the live one.
        return aggregate(Labeled(values, tuple({k: v for k, v in la.items() if k != self.label}
                                               for la in data.labels)), (), "max")


def as_values(spec: SignalSpec, frame: SeriesFrame) -> SeriesFrame:
    """``frame`` (a store's answer to ``spec``'s query) with the label read as the value where the
    signal's expression asks for it, else ``frame`` unchanged."""
    expr = spec.expr
    if not isinstance(expr, LabelValue) or frame.values.columns.empty:
        return frame
    columns: dict[str, pd.Series] = {}
    labels: dict[str, dict[str, str]] = {}
    for key in frame.values.columns:
        la = frame.labels_of(key)
        number = label_number(la, expr.label)
        kept = {k: v for k, v in la.items() if k != expr.label}
        new_key = series_key(kept)
        column = frame.values[key].where(frame.values[key].isna(), number)
        # Two pools of one engine (a restart with a new size inside the window): the newest wins.
        columns[new_key] = column if new_key not in columns else column.combine_first(columns[new_key])
        labels[new_key] = kept
    return SeriesFrame(pd.DataFrame(columns, index=frame.values.index, dtype=np.float32), labels)
