"""Reading series from CSV or Parquet files users export from their own monitoring.

Accepted shapes: ``timestamp,value``; wide (``timestamp`` plus one numeric column per series);
long (``timestamp``, ``value`` and label columns, one row per series and time). Timestamps are
ISO-8601 strings or Unix epoch seconds/milliseconds. Rows may be unsorted or duplicated and the
grid may have gaps; anything else wrong raises :class:`InputError` naming the file and problem.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from analyzer.signals.frame import SeriesFrame
from oximeter.errors import OximeterError
from oximeter.inputs import InputValueError, parse_duration_s

TIME_COLUMNS = ("timestamp", "time", "ts", "date", "datetime")
MIN_STEP_S = 15.0
MAX_STEP_S = 3600.0
MIN_ROWS = 10


class InputError(OximeterError, ValueError):
    """A series file cannot be used; the message names the file and the problem."""

    def __init__(self, path: str | Path, problem: str) -> None:
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{path}: {problem}")


@dataclass(frozen=True)
class LoadedFile:
    """A file's series on their own (irregular) timestamps, sorted and de-duplicated."""

    values: pd.DataFrame
    labels: Mapping[str, Mapping[str, str]]


def read_table(path: str | Path) -> pd.DataFrame:
    """The raw table of a ``.csv`` or ``.parquet`` file."""
    path = Path(path)
    suffix = path.suffix.lower()
    try:
        if suffix == ".csv":
            return pd.read_csv(path)
        if suffix in (".parquet", ".pq"):
            return pd.read_parquet(path)
    except FileNotFoundError:
        raise InputError(path, "no such file") from None
    except pd.errors.EmptyDataError:
        raise InputError(path, "the file is empty") from None
    except (pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise InputError(path, f"not a readable CSV file ({str(exc).splitlines()[0]})") from None
    except (OSError, ValueError) as exc:
        raise InputError(path, f"not a readable Parquet file ({str(exc).splitlines()[0][:120]})") from None
    raise InputError(path, f"unsupported file type {suffix or '(none)'!r}: use .csv or .parquet")


def _timestamps(path: Path, column: pd.Series) -> pd.DatetimeIndex:
    if pd.api.types.is_numeric_dtype(column):
        numbers = column.astype("float64")
        if numbers.isna().any():
            raise InputError(path, f"column {column.name!r} has empty timestamps")
        unit = "ms" if numbers.abs().max() > 1e11 else "s"
        return pd.DatetimeIndex(pd.to_datetime(numbers, unit=unit, utc=True))
    if column.isna().any():
        raise InputError(path, f"column {column.name!r} has empty timestamps")
    try:
        parsed = pd.to_datetime(column, utc=True, format="ISO8601", errors="coerce")
    except (ValueError, TypeError) as exc:
        raise InputError(path, f"column {column.name!r} has unparseable timestamps ({exc})") from None
    bad = parsed.isna().to_numpy()
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise InputError(path, f"column {column.name!r} has {int(bad.sum())} unparseable timestamp(s), "
                               f"first at data row {row + 1}: {str(column.iloc[row])[:40]!r} "
                               "(use ISO-8601 or Unix seconds)")
    return pd.DatetimeIndex(parsed)


def _numeric(path: Path, column: pd.Series) -> pd.Series:
    values = pd.to_numeric(column, errors="coerce")
    bad = values.isna() & column.notna() & (column.astype(str).str.strip() != "")
    if bad.any():
        row = int(np.flatnonzero(bad.to_numpy())[0])
        raise InputError(path, f"column {column.name!r} has {int(bad.sum())} non-numeric value(s), "
                               f"first at data row {row + 1}: {str(column.iloc[row])[:40]!r}")
    return values.astype("float64")


def series_keys(labels: pd.DataFrame) -> pd.Series:
    """:func:`series_key` of every row of a frame of label columns, vectorised."""
    keys: pd.Series | None = None
    for name in sorted(labels.columns, key=str):
        part = f"{name}=" + labels[name].astype(str)
        keys = part if keys is None else keys + "," + part
    assert keys is not None
    return keys


def load_series_file(path: str | Path) -> LoadedFile:
    """Parse ``path`` into a wide frame (sorted, last duplicate wins) and per-column labels."""
    return parse_table(Path(path), read_table(path))


def parse_table(path: Path, table: pd.DataFrame) -> LoadedFile:
    """Parse an already-read table (``path`` names it in errors); see :func:`load_series_file`."""
    if table.empty:
        raise InputError(path, "the file has no data rows")
    if len(table.columns) < 2:
        raise InputError(path, "expected a timestamp column and at least one value column")
    by_lower = {str(c).strip().lower(): c for c in table.columns}
    time_col = next((by_lower[n] for n in TIME_COLUMNS if n in by_lower), table.columns[0])
    index = _timestamps(path, table[time_col])
    rest = table.drop(columns=[time_col])
    label_cols = [c for c in rest.columns if not pd.api.types.is_numeric_dtype(rest[c]) and c != "value"
                  and pd.to_numeric(rest[c], errors="coerce").isna().all()]
    if label_cols and "value" in rest.columns:
        # Long format: every column but the value is a label, numeric-looking ones (gpu=0) too.
        label_cols = [c for c in rest.columns if c != "value"]
    labels: dict[str, dict[str, str]] = {}
    if label_cols:
        if "value" not in rest.columns:
            raise InputError(path, f"column {label_cols[0]!r} is not numeric "
                                   "(the long format needs a 'value' column)")
        values = _numeric(path, rest["value"])
        names = rest[label_cols].astype(str)
        keys = series_keys(names)
        unique = names.assign(_key=keys.to_numpy()).drop_duplicates("_key")
        for row in unique.to_dict("records"):
            key = str(row.pop("_key"))
            labels[key] = {str(k): str(v) for k, v in row.items()}
        long = pd.DataFrame({"t": index, "key": keys.to_numpy(), "v": values.to_numpy()})
        wide = long.drop_duplicates(["t", "key"], keep="last").pivot(index="t", columns="key", values="v")
    else:
        data = {str(c): _numeric(path, rest[c]).to_numpy() for c in rest.columns}
        wide = pd.DataFrame(data, index=index)
        wide = wide[~wide.index.duplicated(keep="last")]
    wide = wide.sort_index()
    wide.index = pd.DatetimeIndex(wide.index).rename(None)
    wide.columns = wide.columns.rename(None)
    if len(wide.index) < MIN_ROWS:
        raise InputError(path, f"too few timestamps ({len(wide.index)}; at least {MIN_ROWS} needed)")
    return LoadedFile(values=wide.astype(np.float32), labels=labels)


def infer_step_s(index: pd.DatetimeIndex) -> float:
    """The most common spacing of ``index`` (robust to gaps and jitter), in seconds."""
    gaps = np.diff(index.as_unit("ns").asi8) / 1e9
    gaps = gaps[gaps > 0]
    if len(gaps) == 0:
        return 0.0
    return float(np.median(gaps))


def parse_step(text: str) -> float | None:
    """``auto`` → None; ``15s``, ``1m``, ``1h`` or plain seconds → seconds."""
    if text.strip().lower() == "auto":
        return None
    try:
        return parse_duration_s(text.strip().lower(), "step")
    except InputValueError:
        raise ValueError(f"invalid step {text!r}: use auto, or a duration such as 15s, 1m, 1h") from None


def regularise(values: pd.DataFrame, step_s: float) -> pd.DataFrame:
    """``values`` on a regular grid of ``step_s`` from its first timestamp: each sample goes to
    its nearest grid point (the last one wins), missing grid points are NaN."""
    index = pd.DatetimeIndex(values.index)
    step_ns = round(step_s * 1e9)
    start = index[0]
    offsets = np.rint((index.as_unit("ns").asi8 - start.as_unit("ns").value) / step_ns).astype(np.int64)
    snapped = values.set_axis(start + pd.to_timedelta(offsets * step_ns, unit="ns"), axis=0)
    snapped = snapped[~snapped.index.duplicated(keep="last")]
    grid = pd.date_range(start, snapped.index[-1], freq=pd.Timedelta(seconds=step_s))
    return snapped.reindex(grid)


def load_regular(path: str | Path, step_s: float | None = None) -> tuple[SeriesFrame, float]:
    """A file's series on a regular grid (``step_s`` or the inferred one, 15 s – 1 h)."""
    loaded = load_series_file(path)
    index = pd.DatetimeIndex(loaded.values.index)
    step = step_s if step_s is not None else infer_step_s(index)
    if not math.isfinite(step) or not MIN_STEP_S - 1e-6 <= step <= MAX_STEP_S + 1e-6:
        raise InputError(path, f"step {step:g} s is outside the supported 15 s – 1 h")
    return SeriesFrame(regularise(loaded.values, step), loaded.labels), step
