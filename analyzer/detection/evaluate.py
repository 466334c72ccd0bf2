"""One signal, end to end and free of I/O: frame → baselines → detectors → persistence → events."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, replace
from functools import cached_property, partial

import numpy as np
import pandas as pd

from analyzer.detection.baseline_tracker import BaselineTracker
from analyzer.detection.baselines import BaselinePolicy, ChangeWindow, History, compute_baseline
from analyzer.detection.detectors import Detection, Detector
from analyzer.detection.events import AnomalyEvent
from analyzer.detection.hour_scale import hour_scale, like_nodes_of
from analyzer.detection.judges import detectors_of, persistence_of
from analyzer.detection.persistence import Persistence, to_events
from analyzer.signals.frame import Baseline, FrameError, SeriesFrame, time_index, validate_frame
from analyzer.signals.rolling import step_seconds
from analyzer.signals.spec import SignalSpec


def evaluate_signal(spec: SignalSpec, frame: SeriesFrame, *, history: History | None = None,
                    traffic: pd.DataFrame | None = None, anomalous: pd.DataFrame | None = None,
                    changes: Sequence[ChangeWindow] = (), policy: BaselinePolicy | None = None,
                    cumulative: bool = False, step_s: float | None = None,
                    trackers: MutableMapping[str, BaselineTracker] | None = None,
                    cold_rows: int | None = None, hold_s: float | None = None,
                    peaks: bool = False) -> list[AnomalyEvent]:
    """Every persistent anomaly of ``spec`` in ``frame``.

    ``history`` is older data for the seasonal baselines (one frame, or lag_s → same-time
    window; default: the frame itself),
    ``traffic`` the minimum-traffic guard's values (same columns), ``anomalous`` and ``changes``
    are left out of baselines. Several detectors on one series yield one merged event.
    ``trackers`` (detector name → tracker, kept by the caller between cycles) makes baselines
    incremental: only rows new since the last cycle are computed (at most ``cold_rows`` on the
    first cycle).

    ``hold_s`` (whole-frame evaluation only): the frame's own anomalies stay out of its baselines
    as well, from their onset until ``hold_s`` after they clear (how long their incident stays
    open), as the daemon keeps each cycle's anomalies and open incidents out; a fault that lasts
    is never learnt as the new normal. Without it only ``anomalous`` is left out. ``peaks``: each
    event keeps every rise of its peak (``AnomalyEvent.peaks``), for a replay that hands the events
    of a whole-frame evaluation to cycles at earlier times.
    """
    values = validate_frame(frame.values)
    step = step_s or step_seconds(time_index(values.index))
    if step <= 0:
        raise FrameError("a frame needs at least two timestamps to have a step")
    persistence = persistence_of(spec, step)
    policy = policy or BaselinePolicy()
    guard = None
    if spec.min_traffic is not None and traffic is not None and not traffic.columns.empty:
        aligned = traffic.reindex(index=values.index, columns=values.columns)
        counts = aligned.to_numpy(dtype=np.float64)
        if spec.widen_s is not None:
            values, counts = widen_ratio(values, counts, spec.min_traffic.minimum,
                                         spec.guard_window_s(), spec.widen_s, step)
        guard = counts >= spec.min_traffic.minimum
    events: list[AnomalyEvent] = []
    for detector in detectors_of(spec, cumulative=cumulative):
        if spec.peer_labels:
            # Peers share these labels (e.g. the same model): one group per combination.
            detector = detector.with_peer_groups({
                str(c): "|".join(frame.labels_of(str(c)).get(k, "") for k in spec.peer_labels)
                for c in values.columns})
        baseline, tracker = None, None
        if detector.uses_baseline:
            if trackers is not None:
                tracker = trackers.get(detector.name)
                if tracker is None:
                    tracker = trackers[detector.name] = BaselineTracker(policy, max_new_rows=cold_rows)
            inputs = _BaselineInputs.of(detector, values, history, policy, frame, tracker)
            baseline = inputs.baseline(anomalous, changes)
        detection = _detection(detector, values, baseline, guard)
        if baseline is not None and tracker is None and hold_s is not None:
            redo = partial(_masked_baseline, inputs, anomalous, changes)
            detection = _held(detector, detection, values, persistence, guard, math.ceil(hold_s / step), redo)
        young = None if baseline is None else baseline.provisional
        events += to_events(detection, detector, persistence, signal=spec.name, layer=spec.layer,
                            labels=frame.labels, provisional=young, peaks=peaks)
    return merge_events(events)


def widen_ratio(values: pd.DataFrame, counts: np.ndarray, minimum: float, window_s: float,
                widen_s: float, step_s: float) -> tuple[pd.DataFrame, np.ndarray]:
    """``values`` (a ratio over ``window_s``, its denominator ``counts``) where a window holds
    ``minimum``; elsewhere the ratio over that window and the ones just before it, back to
    ``widen_s``, from the first that together hold ``minimum`` (the counts summed with it). The
    windows do not overlap: each is ``window_s`` rows of ``step_s`` before the last."""
    lag = round(window_s / step_s)
    if lag < 1:
        return values, counts
    ratio = values.to_numpy(dtype=np.float64)
    num = np.nan_to_num(ratio * counts)
    den = np.nan_to_num(counts)
    out_v, out_c = ratio.copy(), counts.copy()
    todo = ~(counts >= minimum)
    sum_num, sum_den = num.copy(), den.copy()
    for k in range(1, int(widen_s // window_s)):
        shift = k * lag
        if shift >= len(num) or not todo.any():
            break
        sum_num[shift:] += num[:-shift]
        sum_den[shift:] += den[:-shift]
        sum_den[:shift] = np.nan  # windows before the frame starts: not known
        done = todo & (sum_den >= minimum)
        with np.errstate(invalid="ignore", divide="ignore"):
            out_v = np.where(done, sum_num / sum_den, out_v)
        out_c = np.where(done, sum_den, out_c)
        todo &= ~done
    return pd.DataFrame(out_v, index=values.index, columns=values.columns, copy=False), out_c


def needs_history(spec: SignalSpec) -> bool:
    """Whether any of the signal's detectors compares with a baseline (so history is worth fetching)."""
    return any(d.uses_baseline for d in detectors_of(spec))


@dataclass
class _BaselineInputs:
    """What one detector's baseline is formed from, transformed once: a whole-frame evaluation
    forms it up to three times (its own anomalies left out in turn), the hour scale only once, as
    no anomaly is left out of it."""

    values: pd.DataFrame
    older: History | None
    policy: BaselinePolicy
    tracker: BaselineTracker | None
    # Column → like-node key, for a detector that reads the hour's spread (None: it does not).
    like_nodes: Mapping[str, str] | None

    @classmethod
    def of(cls, detector: Detector, values: pd.DataFrame, history: History | None, policy: BaselinePolicy,
           frame: SeriesFrame, tracker: BaselineTracker | None) -> _BaselineInputs:
        """``detector``'s view of the live values and of ``history``."""
        older: History | None
        if history is None:
            older = None
        elif isinstance(history, pd.DataFrame):
            older = detector.transform(validate_frame(history))
        else:
            older = {lag: detector.transform(validate_frame(win)) for lag, win in history.items()}
        # Only a detector that reads the hour's spread needs each series' like nodes, and only
        # the same-time windows give it one.
        hourly = detector.uses_hour_scale and isinstance(older, Mapping)
        return cls(detector.transform(values), older, policy, tracker,
                   like_nodes_of(frame) if hourly else None)

    def baseline(self, anomalous: pd.DataFrame | None, changes: Sequence[ChangeWindow]) -> Baseline:
        """The baseline with ``anomalous`` and ``changes`` left out."""
        older = self.older
        if self.tracker is not None and not isinstance(older, pd.DataFrame):
            return self.tracker.update(self.values, older or {}, anomalous=anomalous, changes=changes,
                                       like_nodes=self.like_nodes)
        baseline = compute_baseline(self.values, older, anomalous=anomalous, changes=changes,
                                    policy=self.policy)
        return baseline if self.like_nodes is None else replace(baseline, hour_scale=self._hour_scale)

    @cached_property
    def _hour_scale(self) -> pd.DataFrame | None:
        if not isinstance(self.older, Mapping):
            return None
        index = time_index(self.values.index)
        hour = hour_scale(index, self.values.columns, self.older, self.policy, self.like_nodes)
        if hour is None:
            return None
        return pd.DataFrame(hour, index=index, columns=self.values.columns, copy=False)


def _detection(detector: Detector, values: pd.DataFrame, baseline: Baseline | None,
               guard: np.ndarray | None) -> Detection:
    detection = detector.detect(values, baseline)
    return detection if guard is None else _guarded(detection, guard)


def _held(detector: Detector, detection: Detection, values: pd.DataFrame, persistence: Persistence,
          guard: np.ndarray | None, hold_rows: int,
          baseline_for: Callable[[pd.DataFrame], Baseline]) -> Detection:
    """``detection`` redone with its own anomalies left out of the baseline, as a causal daemon
    would have had them: first each anomaly from its onset to the end of the frame (so a step is
    judged against the level before it, however long it lasts, and ends when the values return),
    then each from its onset to ``hold_rows`` after that end. Samples outside any anomaly keep
    their baseline; two passes settle it (the second only frees what follows a real end)."""
    for to_end in (True, False):
        mask = _spans(detection, persistence, None if to_end else hold_rows)
        if mask is None:
            return detection
        detection = _detection(detector, values, baseline_for(mask), guard)
    return detection


def _spans(detection: Detection, persistence: Persistence, hold_rows: int | None) -> pd.DataFrame | None:
    """Where ``detection``'s persistent anomalies held: onset to their end plus ``hold_rows``
    (None: to the end of the frame). None when there are none."""
    flags = detection.flags.to_numpy(dtype=bool)
    keep = None if detection.keep is None else detection.keep.to_numpy(dtype=bool)
    episodes = persistence.episodes(flags, keep)
    if not episodes:
        return None
    mask = np.zeros(flags.shape, dtype=bool)
    for ep in episodes:
        stop = len(mask) if ep.end is None or hold_rows is None else ep.end + hold_rows
        mask[ep.onset:stop, ep.column] = True
    return pd.DataFrame(mask, index=detection.flags.index, columns=detection.flags.columns, copy=False)


def _masked_baseline(inputs: _BaselineInputs, anomalous: pd.DataFrame | None,
                     changes: Sequence[ChangeWindow], own: pd.DataFrame) -> Baseline:
    return inputs.baseline(_union(anomalous, own), changes)


def _union(given: pd.DataFrame | None, own: pd.DataFrame) -> pd.DataFrame:
    if given is None:
        return own
    aligned = given.reindex(index=own.index, columns=own.columns, fill_value=False).astype(bool)
    return aligned | own


def _guarded(detection: Detection, guard: np.ndarray) -> Detection:
    """Flags only where the traffic guard holds (a ratio of 3 requests means little)."""
    return replace(detection, flags=detection.flags & guard)


def merge_events(events: Sequence[AnomalyEvent]) -> list[AnomalyEvent]:
    """Overlapping events of one signal on one series become one: the earliest detection is kept
    and the merged event clears when the last one does (still active if any is)."""
    ordered = sorted(events, key=lambda e: (e.signal, e.labels, e.detected_at))
    out: list[AnomalyEvent] = []
    for event in ordered:
        prev = out[-1] if out else None
        if (prev is not None and (prev.signal, prev.labels) == (event.signal, event.labels)
                and (prev.cleared_at is None or event.onset <= prev.cleared_at)):
            cleared = None if prev.cleared_at is None or event.cleared_at is None \
                else max(prev.cleared_at, event.cleared_at)
            out[-1] = replace(prev, onset=min(prev.onset, event.onset), cleared_at=cleared)
        else:
            out.append(event)
    return sorted(out, key=lambda e: (e.detected_at, e.signal, e.labels))
