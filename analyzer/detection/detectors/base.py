"""The detector interface: public ``detect`` validates once, subclasses write only ``_detect``.

A detector turns a wide frame (time × series, float32) into a :class:`Detection`: boolean flags
per sample, a score, the reference each value was compared with, and an optional looser ``keep``
condition that persistence uses for hysteresis. Everything is vectorised over the whole frame;
nothing loops per series or per sample.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import ClassVar, Literal, Self

import numpy as np
import pandas as pd

from analyzer.signals.frame import Baseline, FrameError, validate_frame

Direction = Literal["up", "down"]


@dataclass(frozen=True)
class Detection:
    """A detector's verdict on every sample of every series (all frames share one shape)."""

    flags: pd.DataFrame
    score: pd.DataFrame
    reference: pd.DataFrame
    keep: pd.DataFrame | None = None
    # What was compared (the transformed input); filled in by Detector.detect.
    values: pd.DataFrame | None = None


class Detector(ABC):
    """Base of every detector. ``transform`` maps raw values to what is compared (identity here);
    baselines for a detector are computed on its transformed frame.

    A detector is a dataclass of its parameters, registered by ``name`` in
    ``analyzer/detection/detectors/__init__.py`` and built from a signal's ``{type: name, ...parameters}``;
    what the evaluation needs to know about it, it says through the class attributes and hooks
    below (never by its class being checked).
    """

    name: ClassVar[str] = "detector"
    # True: compared with a baseline when one can be formed (``needs_baseline``: only with one).
    uses_baseline: ClassVar[bool] = False
    needs_baseline: ClassVar[bool] = False
    # True: judged relative to a reference (a baseline, its peers): an anomaly at about that
    # reference is the normal level, not a fault (analyzer.diagnosis.opening.distinct).
    relative: ClassVar[bool] = False
    # Formatted with value, reference and score at the event's peak: one line for humans.
    reason_template: ClassVar[str] = "value {value:.4g} (reference {reference:.4g}, score {score:.3g})"
    # True: the reference is the time (s) until the series reaches its capacity, not a baseline
    # value; events carry it as their time to full.
    reference_is_time_to_full: ClassVar[bool] = False

    def transform(self, values: pd.DataFrame) -> pd.DataFrame:
        """What this detector compares (e.g. a counter's increase); identity by default."""
        return values

    def for_input(self, *, cumulative: bool) -> Self:
        """This detector for values that are raw counters (``cumulative``, e.g. a CSV export)
        rather than already increases; unchanged by default."""
        return self

    def with_peer_groups(self, groups: Mapping[str, str]) -> Self:
        """This detector with each column's peer group (the signal's ``peer_labels`` values);
        unchanged by default, since only peer comparisons care."""
        return self

    @property
    def uses_hour_scale(self) -> bool:
        """Whether its baseline should carry the same-hour spread on the baseline days."""
        return False

    def detect(self, values: pd.DataFrame, baseline: Baseline | None = None) -> Detection:
        """Validate ``values`` (and the baseline) once and run the detector's core."""
        frame = self.transform(validate_frame(values))
        if baseline is not None:
            baseline = baseline.aligned(frame)
        elif self.needs_baseline:
            raise FrameError(f"detector {self.name!r} needs a baseline")
        return replace(self._detect(frame, baseline), values=frame)

    @abstractmethod
    def _detect(self, values: pd.DataFrame, baseline: Baseline | None) -> Detection:
        """The detector's core on an already validated, transformed frame."""

    def reason(self, value: float, reference: float, score: float) -> str:
        """The one-line reason for an event peaking at these numbers."""
        return self.reason_template.format(value=value, reference=reference, score=score)


def signed(values: np.ndarray, direction: Direction) -> np.ndarray:
    """``values`` oriented so that "worse" is always larger."""
    return values if direction == "up" else -values


