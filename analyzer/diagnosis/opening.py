"""What may open an incident, apart from which rule names it: a signal allowed to (context-only
symptoms are not), an anomaly clear of what it was compared with, and, where no rule matched, more
than one signal's word for it, a static limit's, or a fast burn of an error budget."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

from analyzer.detection.detectors import DETECTORS
from analyzer.detection.events import AnomalyEvent
from analyzer.diagnosis.case import BURN_SIGNAL
from analyzer.signals.spec import SignalSpec

if TYPE_CHECKING:
    from analyzer.diagnosis.case import Case, Diagnosis


def opens_incident(signal: str, catalogue: Mapping[str, SignalSpec]) -> bool:
    """Whether ``signal`` may open an incident under ``catalogue``, the one in use with the config's
    overrides (context-only symptoms may not; signals it does not know may)."""
    spec = catalogue.get(signal)
    return spec is None or spec.opens_incident


# An anomaly within 5 % of what it was compared with (its baseline, its peers' median: "1.0 ×
# baseline") is the normal level at that moment, not a fault: impact at most, never the reason an
# incident opens nor its root cause. Static limits and counters are absolute and exempt.
MIN_STRENGTH = 1.05


def distinct(event: AnomalyEvent) -> bool:
    """Whether ``event`` stands clear of its reference (always, unless judged relative to one)."""
    value, reference = event.value, event.baseline
    detector = DETECTORS.get(event.detector)
    if detector is None or not detector.relative or reference is None:
        return True
    if not (math.isfinite(value) and math.isfinite(reference)) or value <= 0 or reference <= 0:
        return True
    return max(value / reference, reference / value) >= MIN_STRENGTH


def static_breach(event: AnomalyEvent, catalogue: Mapping[str, SignalSpec]) -> bool:
    """Whether ``event``'s value is beyond its signal's static limit (a threshold, or a counter's
    absolute increase), whatever its baseline."""
    spec = catalogue.get(event.signal)
    if spec is None or not math.isfinite(event.value):
        return False
    if spec.kind == "counter_growth":
        return spec.increase is not None and event.value >= spec.increase
    if spec.threshold is None or spec.kind not in ("latency", "ratio", "gauge"):
        return False
    return event.value < spec.threshold if spec.direction == "down" else event.value > spec.threshold


def may_open(case: Case, diagnosis: Diagnosis) -> bool:
    """Whether ``case`` may open an incident: a signal that may open one, clear of its reference;
    without a matching rule, also two anomalous signals or one static-limit breach (one signal
    over its own baseline for a while, with nothing else wrong, is the noise of a normal peak)."""
    clear = [e for e in case.events if distinct(e)]
    if not any(opens_incident(e.signal, case.catalogue) for e in clear):
        return False
    if diagnosis.rule != "unclassified":
        return True
    # A fast burn is harm measured, not a guess: it opens alone, provisionally, for the rule's own
    # signals to name once their detectors have held.
    return len({e.signal for e in clear}) >= 2 or any(static_breach(e, case.catalogue) for e in clear) \
        or any(e.signal == BURN_SIGNAL for e in clear)
