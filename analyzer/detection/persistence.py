"""Persistence: k-of-n to open, hysteresis to clear, cooldown to merge — wrapped around any
detector's flags (ADTK composes its level-shift detector the same way).

Vectorised over time and series: opening is a trailing count, the open/close latch is computed
with running maxima of "last opened" and "last broken" indices, so there is no loop per sample
or per series. Strictly causal: whether a sample is active depends only on samples up to it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

import numpy as np
import pandas as pd

from analyzer.detection.detectors.base import Detection, Detector
from analyzer.detection.events import AnomalyEvent, Peak
from analyzer.signals.frame import parse_key, time_index
from analyzer.signals.rolling import trailing_sum


@dataclass(frozen=True)
class Episode:
    """One active run of one column, as row positions (``end`` is the clearing row, or None)."""

    column: int
    onset: int
    detected: int
    end: int | None


@dataclass(frozen=True)
class Persistence:
    """Open when at least ``k`` of the last ``n`` samples are flagged; stay open while a ``keep``
    sample (the detector's looser condition, or a flag) occurred in the last ``clear_n`` samples;
    a recurrence within ``cooldown`` samples of clearing continues the same event."""

    k: int = 3
    n: int = 4
    clear_n: int = 4
    cooldown: int = 0

    def __post_init__(self) -> None:
        if not 1 <= self.k <= self.n:
            raise ValueError(f"persistence needs 1 <= k <= n, got k={self.k}, n={self.n}")
        if self.clear_n < 1 or self.cooldown < 0:
            raise ValueError("persistence needs clear_n >= 1 and cooldown >= 0")

    @classmethod
    def for_step(cls, window_s: float, step_s: float, *, fraction: float = 0.75, clear_s: float | None = None,
                 cooldown_s: float = 0.0, min_n: int = 3) -> Persistence:
        """Persistence over ``window_s`` on a grid of ``step_s``: n samples cover the window (at
        least ``min_n``), k is ``fraction`` of them; clearing takes ``clear_s`` (default: n samples)."""
        n = max(min_n, math.ceil(window_s / step_s - 1e-9))
        k = max(1, min(n, math.ceil(fraction * n - 1e-9)))
        clear_n = n if clear_s is None else max(1, math.ceil(clear_s / step_s - 1e-9))
        return cls(k=k, n=n, clear_n=clear_n, cooldown=math.ceil(cooldown_s / step_s - 1e-9))

    def active(self, flags: np.ndarray, keep: np.ndarray | None = None) -> np.ndarray:
        """Boolean (time × series) array: where an event is open."""
        flags = np.asarray(flags, dtype=bool)
        if flags.ndim == 1:
            return self.active(flags[:, None], None if keep is None else np.asarray(keep)[:, None])[:, 0]
        opened = trailing_sum(flags, self.n) >= self.k
        held = flags if keep is None else (flags | np.asarray(keep, dtype=bool))
        kept = trailing_sum(held, self.clear_n) > 0
        alive = opened | kept
        rows = np.arange(flags.shape[0])[:, None]
        last_open = np.maximum.accumulate(np.where(opened, rows, -1), axis=0)
        last_break = np.maximum.accumulate(np.where(alive, -1, rows), axis=0)
        return alive & (last_open > last_break)

    def episodes(self, flags: np.ndarray, keep: np.ndarray | None = None) -> list[Episode]:
        """Every active run, cooldown-merged, ordered by column then time."""
        flags = np.asarray(flags, dtype=bool)
        if flags.ndim == 1:
            flags = flags[:, None]
            keep = None if keep is None else np.asarray(keep)[:, None]
        # Only columns with a flag can open an event: in a healthy fleet that is almost none.
        hot = np.flatnonzero(flags.any(axis=0))
        act = self.active(flags[:, hot], None if keep is None else np.asarray(keep, dtype=bool)[:, hot])
        padded = np.vstack([np.zeros((1, act.shape[1]), bool), act, np.zeros((1, act.shape[1]), bool)])
        edges = np.diff(padded.astype(np.int8), axis=0)
        # Transposed so that nonzero() walks column by column: starts and ends pair up in order.
        start_hot, start_row = np.nonzero(edges.T == 1)
        _, end_row = np.nonzero(edges.T == -1)
        start_col = hot[start_hot]
        rows = flags.shape[0]
        out: list[Episode] = []
        for col, det, end in zip(start_col.tolist(), start_row.tolist(), end_row.tolist(), strict=True):
            window = flags[max(0, det - self.n + 1): det + 1, col]
            onset = det - len(window) + 1 + int(np.argmax(window))
            cleared = None if end >= rows else end
            prev = out[-1] if out else None
            if (prev is not None and prev.column == col and prev.end is not None
                    and onset - prev.end < self.cooldown):
                out[-1] = Episode(col, prev.onset, prev.detected, cleared)
            else:
                out.append(Episode(col, onset, det, cleared))
        return out


def to_events(detection: Detection, detector: Detector, persistence: Persistence, *, signal: str,
              layer: str, labels: Mapping[str, Mapping[str, str]] | None = None,
              provisional: pd.DataFrame | None = None, peaks: bool = False) -> list[AnomalyEvent]:
    """Events from a detection: each carries the value, reference and score at its peak so far
    (the value is what the detector compared, e.g. a counter's increase), and whether it was
    detected against a provisional baseline (``Baseline.provisional``: no seasonal one yet)."""
    flags = detection.flags.to_numpy(dtype=bool)
    keep = None if detection.keep is None else detection.keep.to_numpy(dtype=bool)
    episodes = persistence.episodes(flags, keep)
    if not episodes:
        return []
    # Only the columns with an event are read (a healthy fleet has almost none).
    hot = sorted({ep.column for ep in episodes})
    where = {col: i for i, col in enumerate(hot)}
    score = np.abs(detection.score.iloc[:, hot].to_numpy(dtype=np.float64))
    ref = detection.reference.iloc[:, hot].to_numpy(dtype=np.float64)
    compared = detection.values if detection.values is not None else detection.reference
    shown = compared.iloc[:, hot].to_numpy(dtype=np.float64)
    index = time_index(detection.flags.index)
    columns = detection.flags.columns
    events: list[AnomalyEvent] = []
    ttf = detector.reference_is_time_to_full
    young = None if provisional is None else provisional.to_numpy(dtype=bool)
    for ep in episodes:
        stop = len(index) if ep.end is None else ep.end
        c = where[ep.column]
        flagged = flags[ep.detected:stop, ep.column]
        span = np.nan_to_num(np.where(flagged, score[ep.detected:stop, c], -np.inf), nan=-np.inf)
        if peaks:
            # Every row where the peak so far rose (the first maximum of each level, as argmax
            # takes it): the last is the event's peak, the others what it showed before.
            running = np.maximum.accumulate(span)
            rows = ep.detected + np.flatnonzero(np.r_[True, running[1:] > running[:-1]])
        else:
            rows = np.array([ep.detected + int(np.argmax(span))])
        rises = tuple(_peak(index[row].to_pydatetime(), float(shown[row, c]), float(ref[row, c]),
                            float(score[row, c]), detector, ttf) for row in rows)
        top = rises[-1]
        col = str(columns[ep.column])
        entity = (labels or {}).get(col) or parse_key(col)
        events.append(AnomalyEvent(
            signal=signal,
            layer=layer,
            labels=AnomalyEvent.labels_from(entity),
            onset=index[ep.onset].to_pydatetime(),
            detected_at=index[ep.detected].to_pydatetime(),
            cleared_at=None if ep.end is None else index[ep.end].to_pydatetime(),
            value=top.value,
            baseline=top.baseline,
            score=top.score,
            reason=top.reason,
            detector=detector.name,
            time_to_full_s=top.time_to_full_s,
            provisional=bool(young is not None and young[ep.detected, ep.column]),
            peaks=rises if peaks else (),
        ))
    return events


def _peak(at: datetime, value: float, reference: float, score: float, detector: Detector, ttf: bool) -> Peak:
    """One rise of an event's peak, as its fields say it (a trend's reference is its time to full)."""
    known = bool(np.isfinite(reference))
    return Peak(at, value, reference if known and not ttf else None, score,
                detector.reason(value, reference, score), reference if known and ttf else None)

