"""An event's peak as it rose: a replay whose detection ran over the whole history tells each cycle
the peak reached by then, as the daemon's own cycle (which reads data up to then) would."""

from __future__ import annotations

import numpy as np

from analyzer.detection.evaluate import evaluate_signal
from analyzer.detection.events import AnomalyEvent
from analyzer.signals.catalogue import CATALOGUE
from analyzer.signals.frame import SeriesFrame
from drills.detected import as_of
from tests.analyzer.analyzer_frames import at, frame

# A GPU past its 85 °C limit from row 10, climbing to 99 °C, back below at row 30.
HOT = np.r_[np.full(10, 70.0), [88, 90, 89, 93, 95, 94, 99, 96], np.full(12, 91.0), np.full(10, 70.0)]


def _event() -> AnomalyEvent:
    [event] = evaluate_signal(CATALOGUE["gpu_temperature"],
                              SeriesFrame(frame({"gpu=0,node=n1": HOT}), {}), step_s=60.0, peaks=True)
    return event


def test_the_peaks_rise_and_end_at_the_events_own() -> None:
    event = _event()
    values = [p.value for p in event.peaks]
    assert values == sorted(set(values)) and values[-1] == event.value == 99.0
    assert event.peaks[0].at == event.detected_at
    assert event.peaks[-1].reason == event.reason


def test_a_live_cycle_keeps_no_peaks() -> None:
    """The daemon's own cycle reads data up to now: its events' peak is the one reached by then."""
    [event] = evaluate_signal(CATALOGUE["gpu_temperature"],
                              SeriesFrame(frame({"gpu=0,node=n1": HOT}), {}), step_s=60.0)
    assert event.peaks == () and event.value == 99.0 and event.peak_by(at(13).to_pydatetime()) is event


def test_a_cycle_before_the_peak_sees_the_peak_reached_by_then() -> None:
    event = _event()
    before = as_of([event], at(13).to_pydatetime())
    assert [e.value for e in before] == [93.0]
    assert "93" in before[0].reason and "99" not in before[0].reason
    assert [e.value for e in as_of([event], at(29).to_pydatetime())] == [99.0]
    # Once it cleared, the cycle sees the event itself.
    assert as_of([event], at(39).to_pydatetime()) == [event]
