"""A detector is one file plus one registry line: a toy detector, registered in DETECTORS alone,
is named by a configured signal and runs through the ordinary evaluation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pandas as pd
import pytest
from analyzer_frames import frame

from analyzer.detection.detectors import DETECTORS, Detection, Detector
from analyzer.detection.evaluate import evaluate_signal
from analyzer.detection.judges import detectors_of
from analyzer.signals.frame import Baseline, SeriesFrame
from analyzer.signals.rolling import like
from oximeter.config import parse_config
from oximeter.errors import ConfigError


@dataclass
class ToySpike(Detector):
    """Flags values above ``limit`` (what a new detector's file would hold)."""

    limit: float = 10.0

    name: ClassVar[str] = "toy_spike"

    def _detect(self, values: pd.DataFrame, baseline: Baseline | None) -> Detection:
        v = values.to_numpy()
        return Detection(like(values, v > self.limit), like(values, v / self.limit), like(values, self.limit))


@pytest.fixture
def registered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(DETECTORS, "toy_spike", ToySpike)  # the one registry line


def _signal(detectors: list[dict[str, object]]) -> dict[str, object]:
    return {"layer": "engine", "kind": "gauge", "promql": "toy_queue_depth", "for_s": 180,
            "detectors": detectors}


@pytest.mark.usefixtures("registered")
def test_a_registered_detector_runs_from_configuration_alone() -> None:
    toy = _signal([{"type": "toy_spike", "limit": 40}])
    config = parse_config({"analyzer": {"signals": {"toy_depth": toy}}})
    spec = config.analyzer.catalogue()["toy_depth"]
    assert [type(d) for d in detectors_of(spec)] == [ToySpike]
    values = np.full(60, 5.0)
    values[30:40] = 50.0  # ten minutes over the limit on node n1; n2 stays quiet
    data = SeriesFrame(frame({"a": values, "b": np.full(60, 5.0)}),
                       {"a": {"node": "n1"}, "b": {"node": "n2"}})
    [event] = evaluate_signal(spec, data)
    assert (event.signal, event.detector, event.entity) == ("toy_depth", "toy_spike", {"node": "n1"})
    assert event.value == 50.0


@pytest.mark.usefixtures("registered")
def test_a_listed_detector_replaces_the_kinds_default() -> None:
    # gpu_temperature's kind gives a threshold at 85; listing a detector replaces it.
    config = parse_config({"analyzer": {"signals": {"gpu_temperature": {
        "detectors": [{"type": "toy_spike", "limit": 70}]}}}})
    [detector] = detectors_of(config.analyzer.catalogue()["gpu_temperature"])
    assert detector == ToySpike(limit=70)


@pytest.mark.parametrize(("detector", "problem"), [
    ({"type": "no_such_detector"}, "unknown detector type 'no_such_detector'"),
    ({"type": "toy_spike", "limt": 40}, "limt"),
])
@pytest.mark.usefixtures("registered")
def test_a_bad_detector_is_refused_naming_the_key(detector: dict[str, object], problem: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config({"analyzer": {"signals": {"toy_depth": _signal([detector])}}}, "cfg.yaml")
    text = str(info.value)
    assert "cfg.yaml" in text and "analyzer.signals" in text and "toy_depth" in text and problem in text


def test_unregistered_the_toy_is_unknown() -> None:
    with pytest.raises(ConfigError, match="unknown detector type 'toy_spike'"):
        parse_config({"analyzer": {"signals": {"toy_depth": _signal([{"type": "toy_spike"}])}}})
