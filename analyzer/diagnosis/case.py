"""What a diagnosis rule reads and returns: a :class:`Case` (a group's anomaly events and a
snapshot of current values per entity) and a :class:`Diagnosis`, plus how their values read."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from analyzer.detection.events import AnomalyEvent
from analyzer.diagnosis.cause import RootCause
from analyzer.signals.catalogue import CATALOGUE
from analyzer.signals.spec import SignalSpec
from oximeter.vocabulary import LAYERS, Severity

Labels = tuple[tuple[str, str], ...]
LOWER_LAYERS = frozenset(LAYERS[:4])

# signal -> entity labels -> current value. Catalogue signal names, plus the context-only series
# below that the daemon derives from oximeter_gpu_clock_event_active{reason}.
Snapshot = Mapping[str, Mapping[Labels, float]]
THERMAL_REASON = "gpu_clock_thermal"  # 1 while hw_thermal or sw_thermal is active on the GPU
THROTTLE_REASON = "gpu_clock_throttle"  # 1 while any clock event reason but idle is active
# The most requests the engine held waiting for a batch slot (or KV blocks) in the last 15 min: from
# ``Thresholds.engine_full_waiting`` on, the engine itself was full, however briefly. Bursts of a
# few seconds fill it and build a queue while 1-minute GPU utilisation stays unremarkable, so this
# is capacity evidence utilisation misses.
# 15 min: the queue wait it explains is a p99 over 5 min held 10 min more before it is an event, so
# the burst behind a queue-wait event can be that old when the rule first sees the event.
ENGINE_WAITING = "engine_waiting_max"
# The event of a node whose requests spend an error budget fast (``analyzer/diagnosis/burn_events.py``);
# its value is the burn rate.
BURN_SIGNAL = "slo_burn"
# Sequences a node's engines preempted over the last 15 min (the same reach as ENGINE_WAITING):
# the burst that held requests back can be over, its 5-min rate back at 0, by the time the
# latency it caused has held long enough to be an event.
ENGINE_PREEMPTED = "engine_preempted_15m"





@dataclass(frozen=True)
class Thresholds:
    """The rules' own limits, which no signal defines (a signal's limit is its catalogue threshold:
    :meth:`Case.limit`)."""

    gpu_util_low: float = 0.5
    gpu_util_high: float = 0.85
    # Requests an engine held waiting at once that say it was full: one is a request caught between
    # arriving and the scheduler's next step, which a healthy, lightly loaded engine shows now and
    # then (and one behind an admission limit too); a full engine holds several.
    engine_full_waiting: float = 2.0
    # How much busier than every one of its node-mates a GPU must be to be the card a node's
    # latency gap comes from: tensor-parallel mates do the same work, so only a slower card is
    # busier, by about its slowdown (the slow cards worth naming are 1.3 times slower or more).
    slow_card_ratio: float = 1.2
    # How many times its peers' median requests a node must serve to have taken more than its
    # share: then its engine's queue and its occasional preemptions are that load, not its pool.
    busier_share: float = 1.5


@dataclass(frozen=True)
class Case:
    """What one rule judges: a group's events, the nodes they join on, and current context."""

    events: tuple[AnomalyEvent, ...]
    nodes: frozenset[str] = frozenset()
    snapshot: Snapshot = field(default_factory=dict)
    thresholds: Thresholds = Thresholds()
    # The catalogue in use (config overrides applied): it says which signals are context only.
    catalogue: Mapping[str, SignalSpec] = field(default_factory=lambda: CATALOGUE)
    # Context the inputs cannot feed (stock telemetry without DCGM's clock reasons): a rule does
    # without it rather than read its absence as "no".
    unreadable: frozenset[str] = frozenset()

    def limit(self, signal: str) -> float:
        """``signal``'s static threshold in the catalogue in use, so a configured override reaches
        the rules too; the shipped one where the override has none (or disabled the signal)."""
        spec = self.catalogue.get(signal)
        threshold = spec.threshold if spec is not None else None
        if threshold is None:
            threshold = CATALOGUE[signal].threshold
        if threshold is None:
            raise ValueError(f"signal {signal!r} has no threshold to serve as a limit")
        return threshold

    def of(self, *signals: str) -> list[AnomalyEvent]:
        """Events of any of ``signals``, by onset."""
        return sorted((e for e in self.events if e.signal in signals), key=lambda e: e.onset)

    def context(self, signal: str) -> dict[Labels, float]:
        """Current values of ``signal`` on the group's nodes (snapshot, else the events' values)."""
        out = {labels: value for labels, value in self.snapshot.get(signal, {}).items()
               if dict(labels).get("node") in self.nodes and math.isfinite(value)}
        for event in self.of(signal):
            out.setdefault(event.labels, event.value)
        return out

    def per_gpu(self, signal: str) -> dict[tuple[str, str], float]:
        """``context`` keyed by (node, gpu)."""
        return {(d.get("node", ""), d.get("gpu", "")): v
                for d, v in ((dict(k), v) for k, v in self.context(signal).items())}


@dataclass(frozen=True)
class Diagnosis:
    """A rule's verdict: which layer, what caused it, why we think so, how bad, where to read."""

    rule: str
    layer: str
    root_cause: RootCause
    sentence: str
    severity: Severity
    runbook: str
    cause_signals: tuple[str, ...]


def _name(signal: str) -> str:
    head, _, tail = signal.rpartition("_")
    return f"{head} {tail}" if tail in ("p99", "p95") and head else signal


def fmt_value(signal: str, value: float | None) -> str:
    """A value in the signal's unit, as on-call reads it (``4.8 s``, ``32 %``, ``91 °C``)."""
    if value is None or not math.isfinite(value):
        return "n/a"
    spec = CATALOGUE.get(signal)
    unit = spec.unit if spec else ""
    if unit == "s":
        return f"{value * 1000:.0f} ms" if abs(value) < 1 else f"{value:.1f} s"
    if unit == "°C":
        return f"{value:.0f} °C"
    if unit == "bytes":
        return f"{value / 2**30:.2f} GiB"
    if unit == "ratio":  # a share of a capacity: small ones (a process's share of its host) keep a decimal
        return f"{value * 100:.1f} %" if abs(value) < 0.1 else f"{value * 100:.0f} %"
    if spec is not None and (spec.kind in ("ratio", "hit_rate") or "utilization" in signal):
        return f"{value * 100:.0f} %"
    return f"{value:.3g}"


def describe(event: AnomalyEvent) -> str:
    """``queue_wait p99 4.8 s = 6.1 × baseline`` (or against its baseline value when that is 0);
    ``error budget burn 18×`` for a fast burn."""
    if event.signal == BURN_SIGNAL:
        return f"error budget burn {event.value:.0f}×"
    text = f"{_name(event.signal)} {fmt_value(event.signal, event.value)}"
    base = event.baseline
    if base is not None and math.isfinite(base) and base > 0 and math.isfinite(event.value):
        return f"{text} = {event.value / base:.1f} × baseline"
    if base is not None and math.isfinite(base):
        return f"{text} (baseline {fmt_value(event.signal, base)})"
    return text
