"""An open anomaly is never learnt: a fault that lasts hours stays anomalous (and its incident
open) for as long as it lasts, because its samples stay out of every baseline."""

from __future__ import annotations

import numpy as np
import pandas as pd
from analyzer_frames import at, frame

from analyzer.detection.evaluate import evaluate_signal
from analyzer.incidents.lifecycle import IncidentSettings
from analyzer.signals.catalogue import CATALOGUE
from analyzer.signals.frame import SeriesFrame
from drills.detected import detect
from drills.replay import replay_cycles

SIGNAL = "dependency_latency_p99"
BEFORE, STEP, AFTER = 120, 360, 60  # minutes: 2 h quiet, a 6 h step, 1 h after it
ROWS = BEFORE + STEP + AFTER
LABELS = {"s": {"node": "n1", "dependency": "vectordb"}}


def _series(level: float, factor: float) -> np.ndarray:
    noise = np.random.default_rng(7).normal(1.0, 0.02, ROWS)
    out = np.full(ROWS, level) * noise
    out[BEFORE:BEFORE + STEP] *= factor
    return out


def _yesterday(level: float) -> dict[float, pd.DataFrame]:
    quiet = frame({"s": np.full(ROWS + 60, level) * np.random.default_rng(8).normal(1.0, 0.02, ROWS + 60)})
    return {86400.0: quiet.set_axis(pd.date_range(at(-30) - pd.Timedelta(days=1), periods=ROWS + 60,
                                                  freq="60s"), axis=0)}


def test_a_six_hour_step_stays_anomalous_for_six_hours() -> None:
    values = SeriesFrame(frame({"s": _series(0.05, 2.5)}), LABELS)
    held = evaluate_signal(CATALOGUE[SIGNAL], values, history=_yesterday(0.05), step_s=60.0,
                           hold_s=IncidentSettings().resolve_after_s)
    assert len(held) == 1
    event = held[0]
    assert at(BEFORE) <= event.onset <= at(BEFORE + 2)
    # It clears only once the values are back, within its hysteresis and persistence.
    assert event.cleared_at is not None and at(BEFORE + STEP) <= event.cleared_at <= at(BEFORE + STEP + 10)


def test_without_holding_the_step_is_learnt() -> None:
    # What the hold prevents: the recent baseline (an hour's median) takes the step as normal.
    values = SeriesFrame(frame({"s": _series(0.05, 2.5)}), LABELS)
    learnt = evaluate_signal(CATALOGUE[SIGNAL], values, history=_yesterday(0.05), step_s=60.0)
    assert learnt and learnt[0].cleared_at is not None and learnt[0].cleared_at < at(BEFORE + 60)


def test_a_six_hour_step_keeps_its_incident_open_through_the_replay() -> None:
    frames = {SIGNAL: SeriesFrame(frame({"s": _series(0.05, 6.0)}), LABELS)}
    lagged = {86400.0: {SIGNAL: SeriesFrame(next(iter(_yesterday(0.05).values())), LABELS)}}
    events = detect(frames, 60.0, {SIGNAL: CATALOGUE[SIGNAL]}, same_time=lagged)
    outcome = replay_cycles(frames, events, 60.0, catalogue={SIGNAL: CATALOGUE[SIGNAL]})
    assert len(outcome.incidents) == 1
    incident = outcome.incidents[0]
    assert incident.rule == "dependency_degraded"
    # Resolved only after the fault ended (and its quiet time passed), never during it.
    assert incident.resolved_at is not None and incident.resolved_at >= at(BEFORE + STEP)
    assert [c.kind for c in outcome.changes].count("opened") == 1
