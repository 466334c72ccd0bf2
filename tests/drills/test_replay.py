"""Replay through the analyzer's own cycle, on raw series small enough to read: a scrape target
that stops answering (``up`` at 0) is judged from the frame source like any other signal."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analyzer.signals.catalogue import CATALOGUE
from analyzer.signals.raw import RawStore
from drills.replay import detect, replay_cycles, signal_frames

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
