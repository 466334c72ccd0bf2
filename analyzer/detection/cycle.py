"""One signal across detection cycles: its live window, its cached same-time windows and its
incremental baselines, so that a daemon's cycle is "for each signal: run(source, now)"."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import pandas as pd

from analyzer.detection.baseline_tracker import BaselineTracker
from analyzer.detection.baselines import BaselinePolicy, ChangeWindow
from analyzer.detection.evaluate import evaluate_signal, needs_history
from analyzer.detection.events import AnomalyEvent
from analyzer.signals.frame import SeriesFrame
from analyzer.signals.sources.base import LiveWindow, Source, WindowPool
from analyzer.signals.spec import SignalSpec


@dataclass
class SignalCycle:
    """Detection state of one signal. Each :meth:`run` fetches only new steps (live and, for
    signals with baselines, 1 d / 7 d back), computes baselines for new rows only, and returns
    the signal's events over the live window (active ones have ``cleared_at`` None)."""

    spec: SignalSpec
    policy: BaselinePolicy = field(default_factory=BaselinePolicy)
    live_s: float = 3600.0
    step_s: float = 15.0
    # First cycle: baselines for at most this many newest rows (a restart costs seconds).
    cold_rows: int | None = 40
    live: LiveWindow = field(init=False)
    guard: LiveWindow | None = field(init=False, default=None)
    same_time: dict[float, LiveWindow] = field(init=False, default_factory=dict)
    trackers: dict[str, BaselineTracker] = field(init=False, default_factory=dict)
    last_frame: SeriesFrame | None = field(init=False, default=None)
    # The guard's values of the last run (the rules read a node's traffic against its peers').
    last_traffic: SeriesFrame | None = field(init=False, default=None)
    # Where the windows come from: shared with other signals reading the same data (None: its own).
    pool: WindowPool | None = None

    def __post_init__(self) -> None:
        self.live = self._window(self.spec, self.live_s)
        traffic = self.spec.traffic_spec()
        if traffic is not None:
            self.guard = self._window(traffic, self.live_s)
        if needs_history(self.spec):
            # Each same-time window reads half a seasonal window ahead at a time (see ``run``): one
            # query per half hour instead of one per cycle, for a quarter more held than the window
            # (at 65,536 GPUs an hour of a GPU signal's two same-time windows is 126 MB).
            width = self.live_s + 2 * self.policy.seasonal_half_window_s
            ahead = self.policy.seasonal_half_window_s
            self.same_time = {lag: self._window(self.spec, width, ahead_s=ahead, lag_s=lag)
                              for lag in self.policy.lags_s}

    def _window(self, spec: SignalSpec, window_s: float, *, ahead_s: float = 0.0,
                lag_s: float = 0.0) -> LiveWindow:
        if self.pool is None:
            return LiveWindow(spec, window_s, self.step_s, ahead_s=ahead_s)
        return self.pool.window(spec, window_s, self.step_s, ahead_s=ahead_s, lag_s=lag_s)

    def run(self, source: Source, now: datetime, *, anomalous: pd.DataFrame | None = None,
            changes: Sequence[ChangeWindow] = ()) -> list[AnomalyEvent]:
        """This cycle's events of the signal (``anomalous``/``changes`` are kept out of baselines).
        The minimum-traffic guard is fetched too; where the source has none, it is not applied."""
        frame = self.live.update(source, now)
        self.last_frame = frame
        if frame.values.columns.empty:
            return []
        self.last_traffic = None if self.guard is None else self.guard.update(source, now)
        traffic = None if self.last_traffic is None else self.last_traffic.values
        half = timedelta(seconds=self.policy.seasonal_half_window_s)
        # Older than the live window, a store's samples no longer change: a same-time window may read
        # ahead up to there (with a lag shorter than the window, it cannot read ahead at all).
        settled = now - timedelta(seconds=self.live_s)
        history = {lag: win.update(source, now - timedelta(seconds=lag) + half, settled=settled).values
                   for lag, win in self.same_time.items()} or None
        return evaluate_signal(self.spec, frame, history=history, traffic=traffic, anomalous=anomalous,
                               changes=changes, policy=self.policy, step_s=self.step_s,
                               trackers=self.trackers, cold_rows=self.cold_rows)
