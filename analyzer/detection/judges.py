"""What judges a signal: the detectors its spec names, built from the registry, and its
persistence on a grid. The spec is plain data; detection turns it into working objects."""

from __future__ import annotations

import math
from collections.abc import Mapping

from analyzer.detection.detectors import Detector, build_detector
from analyzer.detection.persistence import Persistence
from analyzer.signals.spec import DetectorSpec, SignalSpec


def build(spec: DetectorSpec) -> Detector:
    """The detector itself, from the registry (a ValueError names an unknown type or parameter)."""
    return build_detector(spec.type, spec.params)


def detectors_of(signal: SignalSpec, *, cumulative: bool = False) -> list[Detector]:
    """The detectors ``signal`` runs, built from the registry.

    ``cumulative``: the values are raw counters (a CSV export), not already increases.
    """
    return [build(spec).for_input(cumulative=cumulative) for spec in signal.detector_specs()]


def persistence_of(signal: SignalSpec, step_s: float) -> Persistence:
    """The k-of-n / hysteresis / cooldown for ``signal`` on a grid of ``step_s``."""
    n = max(signal.min_samples, math.ceil(signal.for_s / step_s - 1e-9))
    return Persistence.for_step(n * step_s, step_s, clear_s=signal.clear_s, cooldown_s=signal.cooldown_s,
                                min_n=signal.min_samples)


def detector_problems(signals: Mapping[str, SignalSpec]) -> list[str]:
    """One line per listed detector the registry cannot build, named by its configuration key."""
    problems = []
    for name, signal in signals.items():
        for i, spec in enumerate(signal.detectors):
            try:
                build(spec)
            except ValueError as exc:
                problems.append(f"analyzer.signals.{name}.detectors.{i}: {exc}")
    return problems
