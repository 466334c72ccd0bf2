"""Replay through the analyzer's own cycle, on raw series small enough to read: a scrape target
that stops answering (``up`` at 0) is judged from the frame source like any other signal."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analyzer.signals.catalogue import CATALOGUE
from analyzer.signals.raw import RawStore
from drills.detected import detect, signal_frames
from drills.replay import ReplayOutcome, replay_cycles, replay_live

MINUTES = 120
DOWN = slice(60, 75)  # the target answers nothing for 15 minutes
TARGET = {"job": "oximeter-gateway", "instance": "n1:9480", "node": "n1"}


def _history() -> RawStore:
    index = pd.date_range("2026-01-07T15:00:00Z", periods=MINUTES, freq="60s")
    up = np.ones((MINUTES, 2), dtype=np.float32)
    up[DOWN, 0] = 0.0
    other = {**TARGET, "instance": "n2:9480", "node": "n2"}
    return RawStore(index, ["up", "up"], [TARGET, other], up)


def test_a_target_down_opens_one_telemetry_lost_incident_that_resolves() -> None:
    frames, step_s = signal_frames(_history())
    events = detect(frames, step_s)
    assert {e.signal for e in events} == {"target_down"}
    outcome = replay_cycles(frames, events, 60.0, catalogue=CATALOGUE)
    [incident] = outcome.incidents
    assert (incident.layer, incident.rule, incident.root_cause.signal) == ("platform", "telemetry_lost",
                                                                           "target_down")
    assert dict(incident.root_cause.labels)["instance"] == "n1:9480"
    assert incident.state == "resolved"
    assert [c.kind for c in outcome.changes] == ["opened", "resolved"]


def test_the_daemons_incremental_loop_judges_the_replay_as_detection_over_the_whole_history() -> None:
    """The same history through the daemon's own incremental cycle (a source and a replayed clock)
    opens the same incident, with the same root cause, told the same way, as the replay whose
    detection ran once over the whole history."""
    frames, step_s = signal_frames(_history())
    whole = replay_cycles(frames, detect(frames, step_s), 60.0, catalogue=CATALOGUE)
    live = replay_live(_history(), 60.0)

    def seen(outcome: ReplayOutcome) -> list[tuple[str, str, str, tuple[tuple[str, str], ...], str]]:
        return [(i.layer, i.rule, i.root_cause.signal, i.root_cause.labels, i.state)
                for i in outcome.incidents]

    assert seen(live) == seen(whole) != []
    assert [(c.kind, c.at) for c in live.changes] == [(c.kind, c.at) for c in whole.changes]
