"""A columnar store of sampled metric families, written as OpenMetrics and Parquet.

The history generator collects the same metric families the live processes expose, once per
step, into one float array per series (NaN = not scraped). OpenMetrics backfill wants every
family in one contiguous block, so nothing can be streamed out before the last step.
"""

from __future__ import annotations

import json
import math
import operator
from array import array
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from prometheus_client.core import Metric

NAN = math.nan
# prometheus_client adds ``_created`` samples to counters and histograms; a backfill does not want
# them (they would be series of their own that never change).
_SKIP_SUFFIXES = ("_created",)


@dataclass
class _Family:
    kind: str
    help: str
    series: dict[tuple[str, tuple[tuple[str, str], ...]], array] = field(default_factory=dict)


_Extra = tuple[tuple[str, str], ...]
# A sample's (name, labels): what says two families' samples go to the same series, in order.
_head = operator.itemgetter(0, 1)


class _Plan(NamedTuple):
    """Where one family's samples go: ``keys`` are its (name, labels) in order, ``slots`` the
    index and series array of every sample kept."""

    keys: list[tuple[object, ...]]
    slots: list[tuple[int, array]]


class SeriesStore:
    """Samples of many series at shared step timestamps (epoch seconds)."""

    def __init__(self, timestamps: list[float]) -> None:
        self.timestamps = timestamps
        self._families: dict[str, _Family] = {}
        self._lookup: dict[tuple[object, ...], array] = {}
        # Per extra labels, where the samples of the last ``add`` went: by family object (one
        # added again unchanged, as ``ChildSampler`` does, only has its values copied) and by family
        # name (a fresh family with the same samples in the same order skips the series lookup).
        self._by_id: dict[_Extra, dict[int, tuple[Metric, _Plan]]] = {}
        self._by_name: dict[_Extra, dict[str, _Plan]] = {}

    def add(
        self, step: int, families: Iterable[Metric], extra_labels: Mapping[str, str] | None = None
    ) -> None:
        """Record every sample of ``families`` at step index ``step``.

        A family is read when added; the same object added again is taken to be unchanged.
        """
        extra: _Extra = tuple(sorted((extra_labels or {}).items()))
        last_id = self._by_id.get(extra, {})
        last_name = self._by_name.get(extra, {})
        by_id: dict[int, tuple[Metric, _Plan]] = {}
        by_name: dict[str, _Plan] = {}
        for fam in families:
            known = last_id.get(id(fam))
            if known is not None and known[0] is fam:
                plan = known[1]
            else:
                same_name = last_name.get(fam.name)
                if same_name is not None and same_name.keys == list(map(_head, fam.samples)):
                    plan = same_name
                else:
                    plan = self._plan(fam, extra)
            samples = fam.samples
            for i, values in plan.slots:
                values[step] = samples[i].value
            by_id[id(fam)] = (fam, plan)
            by_name[fam.name] = plan
        self._by_id[extra] = by_id
        self._by_name[extra] = by_name

    def _plan(self, fam: Metric, extra: _Extra) -> _Plan:
        entry = self._families.get(fam.name)
        if entry is None:
            entry = self._families[fam.name] = _Family(fam.type, fam.documentation)
        cache = self._lookup
        slots: list[tuple[int, array]] = []
        for i, sample in enumerate(fam.samples):
            if sample.name.endswith(_SKIP_SUFFIXES):
                continue
            # The same (family, sample, labels, extra) seen at an earlier step.
            fast_key = (fam.name, sample.name, tuple(sample.labels.items()), extra)
            values = cache.get(fast_key)
            if values is None:
                labels = dict(sample.labels)
                for label, value in extra:
                    labels.setdefault(label, value)
                series_key = (sample.name, tuple(sorted(labels.items())))
                values = entry.series.get(series_key)
                if values is None:
                    values = entry.series[series_key] = array("d", [NAN]) * len(self.timestamps)
                cache[fast_key] = values
            slots.append((i, values))
        return _Plan(list(map(_head, fam.samples)), slots)

    def values(self, sample_name: str, **labels: str) -> list[list[float]]:
        """Every stored series named ``sample_name`` whose labels include ``labels`` (NaN = absent)."""
        family = self._families.get(_family_of(sample_name, self._families))
        if family is None:
            return []
        return [
            list(values)
            for (name, items), values in sorted(family.series.items())
            if name == sample_name and labels.items() <= dict(items).items()
        ]

    def write_openmetrics(self, path: Path) -> int:
        """One OpenMetrics text file for ``promtool tsdb create-blocks-from openmetrics``."""
        written = 0
        ts_text = [_fmt_ts(t) for t in self.timestamps]
        with path.open("w", encoding="utf-8") as out:
            for name in sorted(self._families):
                fam = self._families[name]
                kind = fam.kind if fam.kind in ("counter", "gauge", "histogram") else "unknown"
                out.write(f"# TYPE {name} {kind}\n# HELP {name} {_escape_help(fam.help)}\n")
                # Histogram series in (labels, le) order so each bucket set reads together.
                for (sample_name, labels), values in sorted(fam.series.items(), key=_series_order):
                    head = sample_name + _labels_text(labels)
                    lines = [f"{head} {_fmt_value(v)} {ts_text[i]}\n" for i, v in enumerate(values) if v == v]
                    out.writelines(lines)
                    written += len(lines)
            out.write("# EOF\n")
        return written

    def write_parquet(self, directory: Path) -> None:
        """``series.parquet`` (id, family, name, type, labels) and ``samples.parquet`` (long form)."""
        ids: list[int] = []
        families: list[str] = []
        names: list[str] = []
        kinds: list[str] = []
        label_json: list[str] = []
        nodes: list[str | None] = []
        gpus: list[str | None] = []
        stamps = np.array([int(t * 1000) for t in self.timestamps], dtype=np.int64)
        ts_parts: list[np.ndarray] = []
        id_parts: list[np.ndarray] = []
        value_parts: list[np.ndarray] = []
        for fam_name, fam in sorted(self._families.items()):
            for (sample_name, labels), values in sorted(fam.series.items(), key=_series_order):
                series_id = len(ids)
                label_map = dict(labels)
                ids.append(series_id)
                families.append(fam_name)
                names.append(sample_name)
                kinds.append(fam.kind)
                label_json.append(json.dumps(label_map, sort_keys=True))
                nodes.append(label_map.get("node"))
                gpus.append(label_map.get("gpu"))
                column = np.frombuffer(values, dtype=np.float64)
                present = ~np.isnan(column)
                ts_parts.append(stamps[present])
                value_parts.append(column[present])
                id_parts.append(np.full(int(present.sum()), series_id, dtype=np.int32))
        pq.write_table(
            pa.table(
                {
                    "series_id": pa.array(ids, pa.int32()),
                    "family": families,
                    "name": names,
                    "type": kinds,
                    "labels": label_json,
                    "node": nodes,
                    "gpu": gpus,
                }
            ),
            directory / "series.parquet",
        )

        def joined(parts: list[np.ndarray], dtype: type) -> np.ndarray:
            return np.concatenate(parts) if parts else np.array([], dtype=dtype)

        pq.write_table(
            pa.table(
                {
                    "timestamp": pa.array(joined(ts_parts, np.int64), pa.timestamp("ms", tz="UTC")),
                    "series_id": pa.array(joined(id_parts, np.int32), pa.int32()),
                    "value": pa.array(joined(value_parts, np.float64), pa.float64()),
                }
            ),
            directory / "samples.parquet",
        )


def _family_of(sample_name: str, families: Mapping[str, object]) -> str:
    for suffix in ("_total", "_bucket", "_count", "_sum", ""):
        if suffix and sample_name.endswith(suffix) and sample_name.removesuffix(suffix) in families:
            return sample_name.removesuffix(suffix)
    return sample_name


def _series_order(item: tuple[tuple[str, tuple[tuple[str, str], ...]], array]) -> tuple[object, ...]:
    (name, labels), _values = item
    rest = tuple((k, v) for k, v in labels if k != "le")
    le = dict(labels).get("le")
    suffix_rank = 0 if name.endswith("_bucket") else 1
    return (rest, suffix_rank, float(le) if le is not None else 0.0, name)


def _labels_text(labels: tuple[tuple[str, str], ...]) -> str:
    if not labels:
        return ""
    inner = ",".join(f'{k}="{_escape_value(v)}"' for k, v in labels)
    return "{" + inner + "}"


def _escape_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _fmt_value(value: float) -> str:
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return repr(value)


def _fmt_ts(t: float) -> str:
    return str(int(t)) if t == int(t) else f"{t:.3f}"
