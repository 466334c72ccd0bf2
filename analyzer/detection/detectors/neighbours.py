"""Neighbour surprise: how unlike every recent stretch of a series its latest stretch is.

A conformal nearest-neighbour detector for a series of unknown meaning (``oximeter detect``'s
default for gauges; any gauge signal without threshold or ratio can opt in). Each sample's
*shape* is its last ``window`` values; its surprise is the mean distance, in robust scales of the
series, from that shape to its ``neighbours`` nearest shapes among the ``reference`` shapes
before it (scikit-learn's neighbour search). A sample is flagged when its surprise is the highest
of the last ``memory`` samples' (a conformal p-value below 1/``memory``), clears a floor, and
stands out from the series' own long-run surprises: the mean of the last few surprises at least
``min_z`` standard deviations above the usual such means (the anomaly likelihood of Numenta's HTM
detector, ``analyzer.detection.detectors.likelihood``). A record alone would come once per ``memory``
samples on any series, so a long or bursty one would raise a false alarm every few days; the
long-run bar keeps that rate low however long the series runs. A value beyond everything the
series has shown, by a margin of that range, is flagged without a record (HTM's "spatial
anomaly"): a shift's first samples. Level shifts, spikes, changes in variance and broken daily
shapes all give shapes with no near neighbour. After a flag the detector is quiet for ``quiet``
samples: an anomaly is told once. ``bench/nab_eval.py --folds`` chooses the flagging parameters.

Strictly causal: the reference set and the scale are refit every ``block`` samples from samples
before the block, and a flag at t compares only with surprises before t. Lengths are in samples,
not seconds, because shape is what is compared: an hourly and a 5-minute series both need a few
hundred samples to know their usual shapes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

import numpy as np
import pandas as pd
from numpy.lib.stride_tricks import sliding_window_view

from analyzer.detection.detectors.base import Detection, Detector
from analyzer.detection.detectors.likelihood import range_breaks, score_z
from analyzer.signals.frame import Baseline
from analyzer.signals.rolling import like

# MAD of a normal distribution in standard deviations.
MAD_TO_SIGMA = 1.4826


@dataclass
class NeighbourSurprise(Detector):
    """Flags a sample whose recent shape is farther from its nearest past shapes than any sample
    of the last ``memory`` was (at least ``min_surprise`` robust scales away, and ``min_z`` above
    the series' long-run surprises), or whose value leaves the range the series has shown."""

    window: int = 12
    neighbours: int = 10
    # Two weeks of 5-minute samples: a daily shape then has a dozen copies of each hour to match.
    reference: int = 4032
    block: int = 48
    memory: int = 600
    warmup: int = 100
    # A record means something only among enough past surprises (on noise, the first few after
    # the warm-up would each be one).
    min_prior: int = 100
    min_surprise: float = 3.0
    quiet: int = 100
    direction: Literal["up", "down", "both"] = "both"
    min_scale_rel: float = 0.02
    min_scale_abs: float = 1e-6
    # A record must also stand out from the series' long-run surprises (anomaly likelihood): the
    # mean of the last ``likelihood_short`` surprises at least ``min_z`` standard deviations above
    # the means of the ``likelihood_long`` before it (known after ``likelihood_history``). A record
    # of a few hundred samples alone comes about once per ``memory`` samples on any series, so a
    # long or bursty one would raise a false alarm every few days; z 4 is a one-sided tail of
    # 3e-5, near the "four or five nines" of likelihood HTM alarms at. None: records alone.
    min_z: float | None = 4.0
    likelihood_short: int = 10
    likelihood_long: int = 2000
    likelihood_history: int = 200
    # Surprises are in robust scales: below this spread of their means, z would magnify noise.
    likelihood_min_spread: float = 0.1
    # A value beyond everything seen in ``range_warmup`` samples or more, by ``range_tolerance``
    # of that range, is flagged without a record (a shift's first samples). None: off.
    range_tolerance: float | None = 0.05
    range_warmup: int = 200

    name: ClassVar[str] = "neighbour_surprise"
    reason_template: ClassVar[str] = ("value {value:.4g}: its recent shape is {score:.1f} robust σ from "
                                      "every similar past stretch (median {reference:.4g})")

    def __post_init__(self) -> None:
        if self.window < 1 or self.neighbours < 1 or self.block < 1 or self.memory < 1:
            raise ValueError("neighbour_surprise needs window, neighbours, block and memory >= 1")
        if self.reference <= self.neighbours:
            raise ValueError("neighbour_surprise needs more reference shapes than neighbours")
        if min(self.likelihood_short, self.likelihood_long, self.likelihood_history) < 1:
            raise ValueError("neighbour_surprise needs likelihood_short, _long and _history >= 1")

    def surprise(self, series: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per sample of one series: the surprise (NaN while warming up) and the median it was
        scaled around. Gaps carry the last value forward (causal)."""
        n = len(series)
        out = np.full(n, np.nan)
        centre = np.full(n, np.nan)
        filled = pd.Series(series, dtype=np.float64).ffill().to_numpy()
        present = np.flatnonzero(~np.isnan(filled))
        if not len(present):
            return out, centre
        start = int(present[0])
        shapes = sliding_window_view(filled[start:], self.window) if n - start >= self.window else None
        if shapes is None:
            return out, centre
        # Row r of the series (r >= start + window - 1) has the shape shapes[r - start - window + 1].
        first = start + max(self.warmup, self.window + self.neighbours)
        for t0 in range(first, n, self.block):
            t1 = min(n, t0 + self.block)
            past = filled[max(start, t0 - self.reference):t0]
            mid = float(np.median(past))
            scale = max(MAD_TO_SIGMA * float(np.median(np.abs(past - mid))),
                        self.min_scale_rel * abs(mid), self.min_scale_abs)
            lo = max(0, t0 - start - self.reference)
            known = shapes[lo:t0 - start - self.window + 1]  # shapes that end before the block
            # Imported here: scikit-learn costs about 2 s of start-up, and only `oximeter detect`
            # and signals configured with this detector ever fit one.
            from sklearn.neighbors import NearestNeighbors

            search = NearestNeighbors(n_neighbors=self.neighbours).fit(known / scale)
            distance, _ = search.kneighbors(shapes[t0 - start - self.window + 1:t1 - start - self.window + 1]
                                            / scale)
            out[t0:t1] = distance.mean(axis=1)
            centre[t0:t1] = mid
        return out, centre

    def flags_of(self, surprise: np.ndarray, oriented: np.ndarray,
                 breaks: np.ndarray | None = None) -> np.ndarray:
        """Where a surprise beats the last ``memory`` ones (at least ``min_prior`` of them), the
        floor and the long-run bar (``min_z``), pointing the watched way, or where ``breaks``
        (values beyond the series' range, see ``range_breaks``) holds; and no flag was raised in
        the ``quiet`` samples before.

        The record a sample must beat is that of normal behaviour: after a flag, the surprises of
        the ``window`` samples whose shapes hold the flagged sample count in the memory only up
        to the record they broke. Otherwise one anomaly's own peak would sit in the memory for
        ``memory`` samples and hide any later anomaly smaller than it (a second incident on the
        same server within two days)."""
        floor = min(self.min_prior, self.memory)
        record = surprise.copy()  # the memory as later samples see it (anomalies capped)
        flags = np.zeros(len(surprise), dtype=bool)
        broke = np.zeros(len(surprise), dtype=bool) if breaks is None else breaks & ~np.isnan(surprise)
        last = -self.quiet - 1
        with np.errstate(invalid="ignore"):
            candidate = (surprise >= self.min_surprise) & (oriented >= 0)
            if self.min_z is not None:
                candidate &= score_z(surprise, self.likelihood_short, self.likelihood_long,
                                     self.likelihood_history, self.likelihood_min_spread) >= self.min_z
        for row in np.flatnonzero(candidate | broke).tolist():  # sequential: a flag changes the memory
            if row - last <= self.quiet:
                continue
            past = record[max(0, row - self.memory):row]
            past = past[~np.isnan(past)]
            bar = float(past.max()) if len(past) else float(surprise[row])
            if not broke[row] and (len(past) < floor or surprise[row] <= bar):
                continue
            flags[row] = True
            last = row
            np.minimum(record[row:row + self.window], bar, out=record[row:row + self.window])
        return flags

    def breaks_of(self, series: np.ndarray) -> np.ndarray | None:
        """Where a value leaves the series' range the watched way (None when that check is off)."""
        if self.range_tolerance is None:
            return None
        above, below = range_breaks(series, self.range_warmup, self.range_tolerance)
        return {"up": above, "down": below, "both": above | below}[self.direction]

    def _detect(self, values: pd.DataFrame, baseline: Baseline | None) -> Detection:
        data = values.to_numpy(dtype=np.float64)
        flags = np.zeros(data.shape, dtype=bool)
        score = np.full(data.shape, np.nan)
        centre = np.full(data.shape, np.nan)
        # Neighbour search is per series (each has its own shapes): a loop over columns.
        for col in range(data.shape[1]):
            score[:, col], centre[:, col] = self.surprise(data[:, col])
            with np.errstate(invalid="ignore"):
                sign = np.sign(data[:, col] - centre[:, col])
            oriented = {"up": sign, "down": -sign, "both": np.ones_like(sign)}[self.direction]
            flags[:, col] = self.flags_of(score[:, col], oriented, self.breaks_of(data[:, col]))
        return Detection(like(values, flags), like(values, score.astype(np.float32)),
                         like(values, centre.astype(np.float32)))
