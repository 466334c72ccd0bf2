"""Raw metric samples from the simulator's Parquet history (``series.parquet`` + ``samples.parquet``),
held as one dense float32 matrix (time × series) on a regular grid, selectable by name and labels."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from analyzer.signals.tables import InputError, infer_step_s
from oximeter.promql import labels_match, parse_matchers


@dataclass(frozen=True)
class Labeled:
    """Columns of values (time × k) and the labels of each column."""

    values: np.ndarray
    labels: tuple[dict[str, str], ...]


def matches(labels: Mapping[str, str], match: Mapping[str, str]) -> bool:
    """PromQL-style matchers: ``"v"`` equality, ``"~re"`` full regex match, ``"!v"`` inequality."""
    for key, want in match.items():
        have = labels.get(key, "")
        if want.startswith("~"):
            if re.fullmatch(want[1:], have) is None:
                return False
        elif want.startswith("!"):
            if have == want[1:]:
                return False
        elif have != want:
            return False
    return True


class RawStore:
    """Every raw series of a history on one grid."""

    def __init__(self, index: pd.DatetimeIndex, names: list[str], labels: list[dict[str, str]],
                 values: np.ndarray) -> None:
        self.index = index
        self.names = np.asarray(names)
        self.labels = labels
        self.values = values
        self.step_s = infer_step_s(index)

    @classmethod
    def from_history(cls, directory: str | Path) -> RawStore:
        """Load ``series.parquet`` and ``samples.parquet`` written by ``oximeter sim history``."""
        directory = Path(directory)
        try:
            series = pd.read_parquet(directory / "series.parquet", columns=["series_id", "name", "labels"])
            samples = pd.read_parquet(directory / "samples.parquet",
                                      columns=["timestamp", "series_id", "value"])
        except (OSError, ValueError) as exc:
            problem = str(exc).splitlines()[0][:120]
            raise InputError(directory, f"not a history directory ({problem})") from None
        stamps = pd.DatetimeIndex(pd.to_datetime(samples["timestamp"], utc=True))
        times = stamps.unique().sort_values()
        step = infer_step_s(times)
        if step <= 0:
            raise InputError(directory, "the history has fewer than two timestamps")
        index = pd.date_range(times[0], times[-1], freq=pd.Timedelta(seconds=step))
        offsets_ns = stamps.as_unit("ns").asi8 - index[0].as_unit("ns").value
        rows = np.rint(offsets_ns / (step * 1e9)).astype(np.int64)
        position = pd.Series(np.arange(len(series)), index=series["series_id"].to_numpy())
        cols = position.reindex(samples["series_id"].to_numpy()).to_numpy()
        values = np.full((len(index), len(series)), np.nan, dtype=np.float32)
        values[rows, cols] = samples["value"].to_numpy(dtype=np.float32)
        labels = [json.loads(text) for text in series["labels"]]
        return cls(index, series["name"].tolist(), labels, values)

    def only(self, selector: str) -> RawStore:
        """The series a shard's PromQL label matchers select (all of them for an empty selector)."""
        if not selector:
            return self
        matchers = parse_matchers(selector)
        keep = [i for i, labels in enumerate(self.labels) if labels_match(labels, matchers)]
        return RawStore(self.index, self.names[keep].tolist(), [self.labels[i] for i in keep],
                        self.values[:, keep])

    def select(self, name: str, match: Mapping[str, str] | None = None) -> Labeled:
        """The series called ``name`` whose labels satisfy ``match``."""
        candidates = np.flatnonzero(self.names == name)
        keep = [int(i) for i in candidates if matches(self.labels[i], match or {})]
        return Labeled(self.values[:, keep], tuple(self.labels[i] for i in keep))
