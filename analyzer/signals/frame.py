"""The data the detection stages pass around: a wide float32 frame and its series' labels.

One row per timestamp (a regular UTC grid), one column per series. Columns are canonical label
keys (``gpu=0,node=n1``) so that frames from different sources line up without a join.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC

import numpy as np
import pandas as pd

from oximeter.errors import OximeterError


class FrameError(OximeterError, ValueError):
    """A frame handed to a detector is not a time-indexed numeric frame."""


def series_key(labels: Mapping[str, str]) -> str:
    """The canonical column name of a series: its labels sorted, ``k=v`` joined by commas."""
    return ",".join(f"{k}={labels[k]}" for k in sorted(labels)) or "value"


def parse_key(key: str) -> dict[str, str]:
    """Inverse of :func:`series_key` (a bare name becomes ``{"series": name}``)."""
    if "=" not in key:
        return {"series": key}
    return dict(part.split("=", 1) for part in key.split(",") if part)


def time_index(index: pd.Index) -> pd.DatetimeIndex:
    """``index`` as a DatetimeIndex: itself where it is one (the constructor would build a new one,
    which costs more than most of what a cycle does with it)."""
    return index if isinstance(index, pd.DatetimeIndex) else pd.DatetimeIndex(index)


def all_float32(values: pd.DataFrame) -> bool:
    """Whether every column of ``values`` is float32 (so is one with no columns)."""
    return values.shape[1] == 0 or all(d == np.float32 for d in values.dtypes)


def validate_frame(values: pd.DataFrame) -> pd.DataFrame:
    """Check a detector's input once (ADTK style) and return it as float32 with a UTC index."""
    if not isinstance(values, pd.DataFrame):
        raise FrameError(f"expected a pandas DataFrame, got {type(values).__name__}")
    if not isinstance(values.index, pd.DatetimeIndex):
        raise FrameError("the frame index must be a DatetimeIndex")
    if not values.index.is_monotonic_increasing or values.index.has_duplicates:
        raise FrameError("the frame index must be strictly increasing (sort and de-duplicate first)")
    tz = values.index.tz
    # Already UTC (every source's frames): the index is kept as it is, not converted into a copy.
    index = (values.index if tz is UTC else
             values.index.tz_localize("UTC") if tz is None else values.index.tz_convert("UTC"))
    try:
        out = values if all_float32(values) else values.astype(np.float32)
    except (TypeError, ValueError) as exc:
        raise FrameError(f"the frame must be numeric: {exc}") from None
    if out.index is not index:
        out = out.set_axis(index, axis=0)
    return out


@dataclass(frozen=True)
class SeriesFrame:
    """A wide frame plus the labels of each column (what a source returns for one signal)."""

    values: pd.DataFrame
    labels: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

    def labels_of(self, column: str) -> dict[str, str]:
        """The labels of ``column`` (parsed from its key when the source gave none)."""
        found = self.labels.get(column)
        return dict(found) if found is not None else parse_key(column)


@dataclass(frozen=True)
class Baseline:
    """What each value is compared with: a centre and a robust scale, both aligned to the frame.

    ``center`` is NaN where no baseline could be formed (not even a recent window); detectors then
    stay quiet and the signal's static threshold takes over.
    """

    center: pd.DataFrame
    scale: pd.DataFrame
    # The signal's upward spread around this time of day on the baseline days, as a σ (from its
    # upper decile, which a daily peak's bursts move and an IQR does not); None where not formed.
    hour_scale: pd.DataFrame | None = None
    # True where the series is too young for a seasonal baseline (under the policy's
    # ``min_history_s``): the centre is the recent window's alone, and events say so.
    provisional: pd.DataFrame | None = None

    def aligned(self, values: pd.DataFrame) -> Baseline:
        """This baseline reindexed to ``values``' index and columns (missing → NaN); itself where
        every part is on them already (an incremental baseline is formed on the values' own window)."""
        parts = [f for f in (self.center, self.scale, self.hour_scale, self.provisional) if f is not None]
        if all(f.index.equals(values.index) and f.columns.equals(values.columns) for f in parts):
            return self

        def fit(frame: pd.DataFrame) -> pd.DataFrame:
            return frame.reindex(index=values.index, columns=values.columns)

        hour = None if self.hour_scale is None else fit(self.hour_scale)
        young = None if self.provisional is None else self.provisional.reindex(
            index=values.index, columns=values.columns, fill_value=False)
        return Baseline(fit(self.center), fit(self.scale), hour, young)
