"""Arrival traces (simulator/trace.py): reading, scaling to the fleet, daily shape, nodes, history."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from simulator.history import generate
from simulator.scenario import Scenario, Truth, load_scenario, with_trace
from simulator.trace import TraceError, clock_level, load_trace, scenario_arrivals, schedule
from stack.procs import oximeter_argv

ROOT = Path(__file__).resolve().parents[2]
AZURE = ROOT.parent / "shared" / "traces" / "azure_llm_code_2023.csv"
HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
QUIET = Scenario(name="trace-test", truth=Truth(layer="none", rule="none"))
# 20:30 UTC on a Wednesday: the busiest hour of the daily shape.
PEAK_END_S = 1767817800.0


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "trace.csv"
    path.write_text(text, encoding="utf-8")
    return path


def test_reads_the_azure_code_trace() -> None:
    trace = load_trace(AZURE)
    assert len(trace.offsets_s) == 8819
    assert trace.offsets_s[0] == 0 and np.all(np.diff(trace.offsets_s) >= 0)
    assert 3400 < trace.period_s < 3500  # 57 minutes
    assert 1500 < trace.prompt_tokens.mean() < 2500 and 10 < trace.output_tokens.mean() < 50
    # Real arrivals burst: the busiest minute carries several times the mean rate.
    assert trace.peak_rps(1.0) > 3 * trace.mean_rps


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (HEADER + "2023-11-16 18:17:03.97,10,5\n2023-11-16 18:17:04,10\n", "line 3: 2 fields"),
        (HEADER + "2023-11-16 18:17:03.97,10,5\nyesterday,10,5\n", "line 3: bad timestamp 'yesterday'"),
        (HEADER + "2023-11-16 18:17:03.97,10,5\n2023-11-16 18:17:04,-1,5\n", "line 3: token counts"),
        (HEADER + "2023-11-16 18:17:03.97,ten,5\n", "line 2: token counts"),
        ("when,ContextTokens,GeneratedTokens\n1,2,3\n", "line 1: no timestamp column"),
        ("TIMESTAMP,prompt_tokens\n1,2\n", "line 1: no output token column"),
        (HEADER + "1700000000,10,5\n", "at least 2 requests"),
        ("", "line 1: empty file"),
    ],
)
def test_a_malformed_trace_names_the_file_and_line(tmp_path: Path, text: str, problem: str) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(TraceError) as err:
        load_trace(path)
    assert str(path) in str(err.value) and problem in str(err.value)


def test_history_refuses_a_bad_trace_with_its_line(tmp_path: Path) -> None:
    scenario = tmp_path / "quiet.yaml"
    scenario.write_text("name: q\ntruth: {layer: none, rule: none}\n", encoding="utf-8")
    bad = _write(tmp_path, HEADER + "2023-11-16 18:17:03,1,1\n2023-11-16 18:17:04,1,1\n"
                           "2023-11-16 25:00:00,1,1\n")
    result = subprocess.run(
        oximeter_argv("sim", "history", "--scenario", str(scenario), "--trace", str(bad), "--out",
                      str(tmp_path / "out")),
        capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 2
    assert f"{bad}: line 4: bad timestamp" in result.stderr and "Traceback" not in result.stderr


def test_a_scenario_names_its_trace_relative_to_its_file(tmp_path: Path) -> None:
    (tmp_path / "traces").mkdir()
    trace = _write(tmp_path / "traces", HEADER + "1700000000,1,1\n1700000001,1,1\n")
    path = tmp_path / "s.yaml"
    path.write_text("name: s\ntrace: {file: traces/trace.csv, peak_utilisation: 0.5}\n"
                    "truth: {layer: none, rule: none}\n", encoding="utf-8")
    sc = load_scenario(path)
    assert sc.trace is not None and sc.trace.file == str(trace) and sc.trace.peak_utilisation == 0.5


def test_the_busiest_minute_carries_the_peak_rate_and_quiet_hours_are_thinned() -> None:
    trace = load_trace(AZURE)
    flat = schedule(trace, 20.0, 0.0, 4 * 3600.0, lambda t: np.ones_like(t), seed=1)[0]
    per_minute = np.bincount((flat // 60).astype(int))
    # Minute bins are aligned to the clock, not to the busiest run of 60 s, so at most the peak.
    assert 0.8 * 20 * 60 <= per_minute.max() <= 20 * 60
    day = 86400.0
    at = schedule(trace, 20.0, 1767744000.0, 1767744000.0 + day, clock_level(day), seed=1)[0]
    hours = np.bincount(((at % day) // 3600).astype(int), minlength=24)
    assert hours[4] < 0.5 * hours[20]  # night against the evening peak


def test_windows_of_the_same_clock_agree_and_nodes_take_turns() -> None:
    sc = with_trace(QUIET.model_copy(update={"nodes": 3}), str(AZURE), 0.6)
    origin, horizon = PEAK_END_S - 3600.0, 3600.0
    shares = [scenario_arrivals(sc, origin, horizon, i, 4096, 512) for i in range(3)]
    merged = np.sort(np.concatenate([s[0] for s in shares]))
    assert np.all(merged[0::3] == shares[0][0]) and np.all(merged[1::3] == shares[1][0])
    later = np.sort(np.concatenate([scenario_arrivals(sc, origin + 1800.0, horizon, i, 4096, 512)[0]
                                    for i in range(3)]))
    assert np.allclose(later[later < horizon - 1800.0] + 1800.0, merged[merged >= 1800.0])
    assert all(s[1].max() <= 4096 and s[2].max() <= 512 for s in shares)


def _answers(sc: Scenario) -> dict[str, float]:
    store, _fleet = generate(sc, 1.0 / 24, 60.0, PEAK_END_S)
    store.write_parquet(Path("."))  # series.parquet and samples.parquet, read back below
    series, samples = pd.read_parquet("series.parquet"), pd.read_parquet("samples.parquet")
    counter = series[series["name"] == "oximeter_requests_total"]
    last = samples[samples["series_id"].isin(counter["series_id"])].groupby("series_id")["value"].max()
    out: dict[str, float] = {}
    for sid, labels in zip(counter["series_id"], counter["labels"], strict=True):
        code = json.loads(labels)["code"]
        out[code] = out.get(code, 0.0) + float(last.get(sid, 0.0))
    return out


def test_history_load_follows_the_fleet_capacity(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """At 0.6 of capacity in its busiest minute the fleet answers everything; at 3× it sheds load."""
    monkeypatch.chdir(tmp_path)
    calm = _answers(with_trace(QUIET, str(AZURE), 0.6))
    assert calm.get("200", 0) > 100 and calm.get("429", 0) == 0
    overload = _answers(with_trace(QUIET, str(AZURE), 3.0))
    assert overload.get("429", 0) > 0.05 * sum(overload.values())


def test_a_trace_shorter_than_the_peak_window_still_scales(tmp_path: Path) -> None:
    trace = load_trace(_write(tmp_path, HEADER + "".join(f"17000000{i:02d},5,5\n" for i in range(10))))
    speed = trace.speed_for(500.0)  # many passes of the 10-second trace in the busiest minute
    assert trace.peak_rps(speed) == pytest.approx(500.0, rel=0.02)
    assert trace.mean_rps * speed == pytest.approx(500.0, rel=0.05)


def test_drill_checks_the_trace_before_generating_anything(tmp_path: Path) -> None:
    bad = _write(tmp_path, HEADER + "2023-11-16 18:17:03,1,1\nnot a time,1,1\n")
    result = subprocess.run(
        oximeter_argv("drill", "fault_free_week", "--replay", "--trace", str(bad),
                      "--cache", str(tmp_path / "c")),
        capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 2 and f"{bad}: line 3: bad timestamp" in result.stderr
    assert not (tmp_path / "c").exists()
