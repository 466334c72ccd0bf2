"""The anomaly event: what detection hands to correlation, and its JSON form."""

from __future__ import annotations

import json
import math
from bisect import bisect_right
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, NamedTuple


def iso_utc(moment: datetime | None) -> str | None:
    """ISO-8601 in UTC with a ``Z`` suffix (``None`` stays ``None``)."""
    if moment is None:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def utc_at(seconds: float) -> datetime:
    """Epoch seconds (as the stores keep times) as an aware UTC datetime."""
    return datetime.fromtimestamp(seconds, UTC)


def parse_iso(text: str | None) -> datetime | None:
    """Inverse of :func:`iso_utc`."""
    if text is None:
        return None
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _finite(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else float(x)


class Peak(NamedTuple):
    """One rise of an event's peak: when, and what the event's fields said then."""

    at: datetime
    value: float
    baseline: float | None
    score: float
    reason: str
    time_to_full_s: float | None


@dataclass(frozen=True)
class AnomalyEvent:
    """One persistent deviation of one series.

    ``onset`` is the estimated start (the first deviating sample of the window that confirmed it),
    ``detected_at`` the first time the detector could say so from data up to then, ``cleared_at``
    when it returned to normal (``None`` while still active). ``labels`` are the entity labels
    (node, gpu, service, ...) as sorted pairs so that events are hashable and compare exactly.
    """

    signal: str
    layer: str
    labels: tuple[tuple[str, str], ...]
    onset: datetime
    detected_at: datetime
    cleared_at: datetime | None
    value: float
    baseline: float | None
    score: float
    reason: str
    detector: str = ""
    # Seconds until the series reaches its capacity at the current slope (a trend with a known
    # capacity: a leak's "full in"); None for everything else.
    time_to_full_s: float | None = None
    # True: judged against the recent window alone, because the series had too little history
    # for a seasonal (same time yesterday / last week) baseline yet.
    provisional: bool = False
    # Each time the event's peak rose, oldest first, the last being the fields above: kept where
    # detection ran over a longer span than a cycle reads (a whole-history replay), empty otherwise.
    # Not part of its identity nor of its JSON.
    peaks: tuple[Peak, ...] = field(default=(), compare=False, repr=False)

    @staticmethod
    def labels_from(mapping: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
        """Sorted label pairs from a mapping."""
        return tuple(sorted((str(k), str(v)) for k, v in mapping.items()))

    @property
    def entity(self) -> dict[str, str]:
        """The labels as a dict."""
        return dict(self.labels)

    @property
    def active(self) -> bool:
        """Whether the event has not cleared yet."""
        return self.cleared_at is None

    def peak_by(self, now: datetime) -> AnomalyEvent:
        """The event with the peak it had reached by ``now`` (an event found over a longer span
        than a cycle at ``now`` reads may peak after it)."""
        if not self.peaks or self.peaks[-1].at <= now:
            return self
        # The last rise by ``now`` (the first is at detection, so a cycle that sees the event has one).
        k = max(0, bisect_right([p.at for p in self.peaks], now) - 1)
        p = self.peaks[k]
        return replace(self, value=p.value, baseline=p.baseline, score=p.score, reason=p.reason,
                       time_to_full_s=p.time_to_full_s)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict; times are ISO-8601 UTC, non-finite numbers become ``null``."""
        return {
            "signal": self.signal,
            "layer": self.layer,
            "labels": self.entity,
            "onset": iso_utc(self.onset),
            "detected_at": iso_utc(self.detected_at),
            "cleared_at": iso_utc(self.cleared_at),
            "value": _finite(self.value),
            "baseline": _finite(self.baseline),
            "score": _finite(self.score),
            "reason": self.reason,
            "detector": self.detector,
            "time_to_full_s": _finite(self.time_to_full_s),
            "provisional": self.provisional,
        }

    def to_json(self) -> str:
        """One line of JSON (the ``oximeter detect --format jsonl`` record)."""
        return json.dumps(self.to_dict(), sort_keys=True, allow_nan=False)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AnomalyEvent:
        """Inverse of :meth:`to_dict`."""
        onset = parse_iso(data["onset"])
        detected = parse_iso(data["detected_at"])
        if onset is None or detected is None:
            raise ValueError("onset and detected_at are required")
        score = data.get("score")
        value = data.get("value")
        return cls(
            signal=str(data["signal"]),
            layer=str(data["layer"]),
            labels=cls.labels_from(data.get("labels") or {}),
            onset=onset,
            detected_at=detected,
            cleared_at=parse_iso(data.get("cleared_at")),
            value=float("nan") if value is None else float(value),
            baseline=None if data.get("baseline") is None else float(data["baseline"]),
            score=float("nan") if score is None else float(score),
            reason=str(data.get("reason", "")),
            detector=str(data.get("detector", "")),
            time_to_full_s=None if data.get("time_to_full_s") is None else float(data["time_to_full_s"]),
            provisional=bool(data.get("provisional", False)),
        )

    @classmethod
    def from_json(cls, line: str) -> AnomalyEvent:
        """Inverse of :meth:`to_json`."""
        return cls.from_dict(json.loads(line))
