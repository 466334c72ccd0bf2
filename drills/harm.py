"""A drill's harm: the error-budget burn its fault caused, measured on its own history, and whether
the incident's severity follows it (a page exactly when the burn pages, a ticket's burn at least a
warning and no page).

The burn is read the way the analyzer reads it (``analyzer/diagnosis/burn.py``): every cycle of the fault,
on the fault's node, the fastest grade and the burn rate that gives it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from analyzer.detection.events import AnomalyEvent
from analyzer.diagnosis.burn import WINDOWS_S, burn_specs, burns, fastest, headline
from analyzer.diagnosis.burn_events import SHORT
from analyzer.diagnosis.case import Labels, Snapshot
from analyzer.incidents.harm import harmed
from analyzer.signals.slo import SloSettings
from analyzer.signals.sources.frames import FrameSource
from analyzer.signals.sources.stock import read_history
from drills.score import truth_matches
from oximeter.vocabulary import SEVERITY_RANK, Severity

# What each grade is called where a burn is stated.
GRADE_WORDS: dict[str, str] = {"critical": "page", "warning": "ticket", "info": "none"}


@dataclass(frozen=True)
class Peak:
    """The fastest burn seen during a fault: its grade, its rate, and whose objective it was."""

    grade: Severity
    rate: float
    slo: str = ""
    sli: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {"grade": GRADE_WORDS[self.grade], "rate": round(self.rate, 1), "slo": self.slo,
                "sli": self.sli}

    @property
    def text(self) -> str:
        """``page 31.2× (requests/queue_wait)`` or ``none``."""
        if self.rate <= 0:
            return "none"
        return f"{GRADE_WORDS[self.grade]} {self.rate:.1f}× ({self.slo}/{self.sli})"


NO_BURN = Peak("info", 0.0)


def follows(severity: str | None, peak: Peak) -> bool:
    """Whether an incident at ``severity`` (None: no incident) follows ``peak``: critical exactly
    when the burn pages; a ticket's burn makes at least a warning."""
    if severity is None:
        return peak.grade != "critical"
    pages = severity == "critical"
    return pages == (peak.grade == "critical") and SEVERITY_RANK[severity] >= SEVERITY_RANK[peak.grade]


class BurnReader:
    """The burn counts of one history, and the peak burn of a node over a span of it."""

    def __init__(self, directory: Path, slos: SloSettings, *, stock: bool = False) -> None:
        raw = read_history(directory, stock=stock)
        source = FrameSource(raw=raw)
        self.slos, self.index = slos, raw.index
        self.parts: list[tuple[str, list[Labels], np.ndarray]] = []
        for name, spec in burn_specs(slos).items():
            frame = source.signal_frame(spec)
            labels = [AnomalyEvent.labels_from(frame.labels_of(str(c))) for c in frame.values.columns]
            self.parts.append((name, labels, frame.values.reindex(raw.index).to_numpy(np.float64)))

    def snapshot(self, row: int) -> Snapshot:
        """The burn counts at ``row``, as a cycle's snapshot holds them."""
        return {name: {lab: float(v) for lab, v in zip(labels, values[row], strict=True) if math.isfinite(v)}
                for name, labels, values in self.parts}

    def peak(self, node: str | None, start_s: float, end_s: float, every_s: float) -> Peak:
        """The fastest burn on ``node`` (every node: None) sampled every ``every_s`` in [start, end)."""
        index, best = self.index, NO_BURN
        t = start_s
        while t < end_s:
            row = int(index.searchsorted(datetime.fromtimestamp(t, tz=UTC), side="right")) - 1
            t += every_s
            if row < 0:
                continue
            found = burns(self.snapshot(row), self.slos)
            grade, burn = fastest(harmed(found, (), [node] if node else []), self.slos)
            if burn is None:
                continue
            rate = headline(burn, self.slos)
            if (SEVERITY_RANK[grade], rate) > (SEVERITY_RANK[best.grade], best.rate):
                best = Peak(grade, rate, burn.slo, burn.sli)
        return best


# How long after a fault ends its harm is still counted: a latency is observed when its request
# finishes, so a request held by the fault (a stalled engine, a full queue) burns the budget as it
# completes after the fault; the fast page's short window is as long as the analyzer looks back.
AFTERMATH_S = WINDOWS_S[SHORT]


def truth_peak(readers: Sequence[tuple[BurnReader, Sequence[Mapping[str, Any]]]], truth: Mapping[str, Any],
               every_s: float) -> Peak:
    """The fastest burn on ``truth``'s node during its faults and their aftermath (every fault where
    none is on its node), over every window replayed (each history with the faults its truth lists)."""
    node = (truth.get("entity") or {}).get("node")
    best = NO_BURN
    for reader, faults in readers:
        own = sorted([f for f in faults if f.get("node") == node] or list(faults),
                     key=lambda f: float(f["start_epoch_s"]))
        for i, fault in enumerate(own):
            # A fault without an end lasts to the end of the history. Its harm is counted until
            # AFTERMATH_S past its end (never into the next fault's): a request the fault held is
            # recorded when it finishes, after the fault.
            end = fault.get("end_epoch_s") or reader.index[-1].timestamp() + every_s
            end = float(end) + AFTERMATH_S
            if i + 1 < len(own):
                end = min(end, float(own[i + 1]["start_epoch_s"]))
            peak = reader.peak(node, float(fault["start_epoch_s"]), end, every_s)
            if (SEVERITY_RANK[peak.grade], peak.rate) > (SEVERITY_RANK[best.grade], best.rate):
                best = peak
    return best


def harm_lines(expected: Sequence[Mapping[str, Any]], incidents: Sequence[Mapping[str, Any]],
               readers: Sequence[tuple[BurnReader, Sequence[Mapping[str, Any]]]], every_s: float,
               ) -> list[dict[str, Any]]:
    """Per expected root cause, the severity of the incident that names it and its fault's burn;
    a fault-free drill has one line: the highest severity opened and the run's fastest burn."""
    lines = []
    for truth in expected:
        hit = next((i for i in incidents if truth_matches(i, truth)), None)
        severity = None if hit is None else str(hit["severity"])
        peak = truth_peak(readers, truth, every_s)
        lines.append({"rule": truth["rule"], "severity": severity, "burn": peak.to_dict(),
                      "follows": follows(severity, peak)})
    if not expected:
        severity = max((str(i["severity"]) for i in incidents), key=SEVERITY_RANK.__getitem__, default=None)
        peak = NO_BURN
        for reader, _ in readers:
            start, end = reader.index[0].timestamp(), reader.index[-1].timestamp()
            found = reader.peak(None, start, end, every_s)
            if (SEVERITY_RANK[found.grade], found.rate) > (SEVERITY_RANK[peak.grade], peak.rate):
                peak = found
        lines.append({"rule": "none", "severity": severity, "burn": peak.to_dict(),
                      "follows": follows(severity, peak)})
    return lines


# How long after a fault's onset its harm is measured: the fast page's short window.
ONSET_WINDOW_S = WINDOWS_S[SHORT]


def onset_burn(readers: Sequence[tuple[BurnReader, Sequence[Mapping[str, Any]]]], node: str,
               start_s: float) -> float:
    """The fastest 5-minute burn on ``node`` over the first 5 minutes of its fault starting at
    ``start_s`` (every indicator of every objective; a stuck queue burns every waiting request),
    read in the history that holds that time; 0 when none does."""
    at = start_s + ONSET_WINDOW_S
    for reader, _faults in readers:
        index = reader.index
        if not len(index) or not index[0].timestamp() <= at <= index[-1].timestamp():
            continue
        row = int(index.searchsorted(datetime.fromtimestamp(at, tz=UTC), side="right")) - 1
        rates = [1.0 / b.budget if b.stuck else b.rates.get(SHORT, math.nan)
                 for b in harmed(burns(reader.snapshot(row), reader.slos), (), [node])]
        return max((r for r in rates if math.isfinite(r)), default=0.0)
    return 0.0
