"""``oximeter detect`` on files: one event for a planted shift, nothing on noise or flat lines,
robust to unsorted/duplicated rows and gaps, and a clear error (exit 2) on a malformed file."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analyzer.detection.judges import persistence_of
from analyzer.service.detect_cli import detect_file, detect_series, infer_kind
from analyzer.signals.catalogue import KIND_DEFAULTS
from analyzer.signals.tables import InputError
from stack.procs import oximeter_argv

T0 = pd.Timestamp("2026-02-03T00:00:00Z")
ROWS = 400
SHIFT = 300


@dataclass(frozen=True)
class Series:
    """A generated file: step, timestamp style, and how messy the rows are."""

    step_s: float
    epoch: bool = False
    messy: bool = False
    parquet: bool = False


def write(tmp: Path, values: np.ndarray, spec: Series, name: str = "series") -> Path:
    index = pd.date_range(T0, periods=len(values), freq=pd.Timedelta(seconds=spec.step_s))
    stamps = (index.as_unit("s").asi8 if spec.epoch else index.strftime("%Y-%m-%dT%H:%M:%SZ"))
    table = pd.DataFrame({"timestamp": stamps, "value": values})
    if spec.messy:
        gone = [*range(40, 52), *range(SHIFT + 40, SHIFT + 43)]
        table = table.drop(index=gone)
        table = pd.concat([table, table.iloc[100:130]]).sample(frac=1.0, random_state=3)
    path = tmp / f"{name}.{'parquet' if spec.parquet else 'csv'}"
    if spec.parquet:
        table.to_parquet(path)
    else:
        table.to_csv(path, index=False)
    return path


def shifted(noise: float = 1.0, jump: float = 20.0) -> np.ndarray:
    v = 100.0 + np.random.default_rng(5).normal(0, noise, ROWS)
    v[SHIFT:] += jump
    return v


SHAPES = [Series(15.0), Series(60.0, epoch=True), Series(300.0, messy=True), Series(3600.0, parquet=True),
          Series(15.0, messy=True, parquet=True)]


@pytest.mark.parametrize("spec", SHAPES, ids=lambda s: f"{s.step_s:g}s{'-messy' if s.messy else ''}")
def test_planted_shift_gives_one_event_within_the_persistence_window(tmp_path: Path, spec: Series) -> None:
    events = detect_file(write(tmp_path, shifted(), spec))
    assert len(events) == 1
    [event] = events
    shift_at = T0 + pd.Timedelta(seconds=SHIFT * spec.step_s)
    persistence = persistence_of(KIND_DEFAULTS["gauge"], spec.step_s)
    assert shift_at <= pd.Timestamp(event.onset) <= pd.Timestamp(event.detected_at)
    assert pd.Timestamp(event.detected_at) <= shift_at + pd.Timedelta(seconds=persistence.n * spec.step_s)
    assert event.signal == "series" and event.score > 6


@pytest.mark.parametrize("spec", SHAPES, ids=lambda s: f"{s.step_s:g}s{'-messy' if s.messy else ''}")
@pytest.mark.parametrize("values", [shifted(jump=0.0), np.full(ROWS, 42.0), np.zeros(ROWS)],
                         ids=["noisy", "flat", "zero"])
def test_quiet_series_give_nothing(tmp_path: Path, spec: Series, values: np.ndarray) -> None:
    assert detect_file(write(tmp_path, values, spec)) == []


def test_counter_is_inferred_and_storm_detected(tmp_path: Path) -> None:
    steps = np.full(ROWS, 0.2)
    steps[SHIFT:SHIFT + 20] = 30.0  # 150 per 5 minutes for 5 minutes
    counter = np.cumsum(steps)
    counter[200:] -= counter[199]  # the process restarted: counter back to 0
    frame = pd.DataFrame({"a": counter})
    assert infer_kind(frame) == "counter_growth"
    assert infer_kind(pd.DataFrame({"a": shifted()})) == "gauge"
    [event] = detect_file(write(tmp_path, counter, Series(15.0)))
    assert event.detector == "counter_growth"
    assert pd.Timestamp(event.onset) >= T0 + pd.Timedelta(seconds=SHIFT * 15)


def test_wide_file_names_each_series(tmp_path: Path) -> None:
    index = pd.date_range(T0, periods=ROWS, freq="1min")
    table = pd.DataFrame({"timestamp": index, "gpu0": shifted(jump=0.0), "gpu1": shifted()})
    path = tmp_path / "wide.parquet"
    table.to_parquet(path)
    [event] = detect_file(path)
    assert event.entity == {"series": "gpu1"}


def test_long_file_carries_labels(tmp_path: Path) -> None:
    index = pd.date_range(T0, periods=ROWS, freq="1min")
    parts = [pd.DataFrame({"timestamp": index, "node": node, "gpu": "0", "value": v})
             for node, v in (("n1", shifted(jump=0.0)), ("n2", shifted()))]
    path = tmp_path / "long.csv"
    pd.concat(parts).to_csv(path, index=False)
    [event] = detect_file(path)
    assert event.entity == {"gpu": "0", "node": "n2"}


MALFORMED = [
    ("missing.csv", None, "no such file"),
    ("empty.csv", "", "empty"),
    ("header.csv", "timestamp,value\n", "no data rows"),
    ("onecol.csv", "timestamp\n2026-01-01T00:00:00Z\n", "at least one value column"),
    ("badtime.csv", "timestamp,value\n" + "2026-01-01T00:00:00Z,1\n" * 3 + "yesterday,2\n",
     "unparseable timestamp"),
    ("badvalue.csv", "timestamp,value\n" + "".join(f"{1700000000 + 60 * i},{i}\n" for i in range(20))
     + "1700009999,lots\n", "non-numeric"),
    ("short.csv", "timestamp,value\n1700000000,1\n1700000060,2\n", "too few timestamps"),
    ("fast.csv", "timestamp,value\n" + "".join(f"{1700000000 + i},{i}\n" for i in range(20)),
     "outside the supported 15 s"),
    ("data.txt", "timestamp,value\n", "unsupported file type"),
    ("corrupt.parquet", "not parquet", "not a readable Parquet file"),
]


@pytest.mark.parametrize(("name", "content", "problem"), MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_file_is_a_clear_error(tmp_path: Path, name: str, content: str | None,
                                         problem: str) -> None:
    path = tmp_path / name
    if content is not None:
        path.write_text(content)
    with pytest.raises(InputError, match=problem) as info:
        detect_file(path)
    assert str(info.value).startswith(str(path))


def test_cli_jsonl_prints_only_events(tmp_path: Path) -> None:
    path = write(tmp_path, shifted(), Series(60.0))
    out = subprocess.run(oximeter_argv("detect", "--input", str(path), "--format", "jsonl"),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == 1
    record = json.loads(lines[0])
    assert {"signal", "onset", "detected_at", "cleared_at", "score", "reason"} <= set(record)
    assert record["detected_at"].endswith("Z") and record["signal"] == "series"
    # Under a day of history: said on stderr, stdout keeps to the events.
    assert out.stderr.splitlines() == [
        "oximeter detect: still learning at the file's end: value: judged against the recent window alone "
        "from 2026-02-03T00:00:00Z until 2026-02-04T00:00:00Z (a day of history; events meanwhile are "
        "provisional)"]


def test_cli_malformed_exits_2_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "bad.csv"
    path.write_text("timestamp,value\n" + "2026-01-01T00:00:00Z,1\n" * 12 + "soon,1\n")
    out = subprocess.run(oximeter_argv("detect", "--input", str(path), "--format", "jsonl"),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert out.stdout == ""
    assert str(path) in out.stderr and "unparseable timestamp" in out.stderr


def test_peer_kind_finds_the_odd_gpu_in_a_wide_file(tmp_path: Path) -> None:
    index = pd.date_range(T0, periods=ROWS, freq="1min")
    rng = np.random.default_rng(9)
    table = pd.DataFrame({f"gpu{i}": 0.9 + rng.normal(0, 0.005, ROWS) for i in range(6)}, index=index)
    table.loc[table.index[SHIFT:], "gpu4"] = 0.5  # one GPU much slower than its peers
    path = tmp_path / "peers.csv"
    table.rename_axis("timestamp").reset_index().to_csv(path, index=False)
    [event] = detect_file(path, kind="peer")
    assert event.entity == {"series": "gpu4"} and event.detector == "peer_outlier"
    assert pd.Timestamp(event.onset) == T0 + pd.Timedelta(minutes=SHIFT)


def test_a_downward_shift_is_found_too(tmp_path: Path) -> None:
    [event] = detect_file(write(tmp_path, shifted(jump=-20.0), Series(60.0)))
    # Scores are magnitudes (higher is worse); the direction shows in value vs baseline.
    assert event.score > 6 and event.baseline is not None and event.value < event.baseline - 15


def _uniform_days(days: float, step_s: float, seed: int) -> np.ndarray:
    """``0.2 + 0.05·U(0, 1)``: a busy-but-healthy gauge with no structure at all."""
    return 0.2 + 0.05 * np.random.default_rng(seed).uniform(0.0, 1.0, int(days * 86400 / step_s))


@pytest.mark.parametrize("seed", [3, 4, 5])
def test_days_of_plain_noise_raise_nothing_from_the_first_sample(tmp_path: Path, seed: int) -> None:
    # Its early samples are judged with little history: the warm-up must not read noise as news.
    assert detect_file(write(tmp_path, _uniform_days(4, 30.0, seed), Series(30.0))) == []


@pytest.mark.parametrize("seed", [3, 4, 5])
def test_a_fourfold_step_on_day_four_is_told_within_15_minutes(tmp_path: Path, seed: int) -> None:
    values = _uniform_days(4, 30.0, seed)
    step_row = int(3.5 * 86400 / 30.0)
    values[step_row:] *= 4.0
    [event] = detect_file(write(tmp_path, values, Series(30.0)))
    step_at = T0 + pd.Timedelta(seconds=step_row * 30.0)
    assert step_at <= pd.Timestamp(event.detected_at) <= step_at + pd.Timedelta(minutes=15)


def test_series_are_learning_for_their_first_day_each_from_its_own_first_sample(tmp_path: Path) -> None:
    index = pd.date_range(T0, periods=int(1.5 * 86400 / 300), freq="300s")
    late = np.full(len(index), np.nan)
    late[len(index) // 2:] = 3.0  # appears 18 h in: still learning when the file ends
    table = pd.DataFrame({"timestamp": index, "early": 1.0, "also_early": 2.0, "late": late})
    path = tmp_path / "wide.parquet"
    table.to_parquet(path)
    _, stretches = detect_series(path)
    assert [(s.series, s.since, s.until, s.still) for s in stretches] == [
        (("also_early", "early"), T0, T0 + pd.Timedelta(days=1), False),
        (("late",), index[len(index) // 2], index[len(index) // 2] + pd.Timedelta(days=1), True)]
