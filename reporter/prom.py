"""A small Prometheus HTTP API client for the digest (instant and range queries over ``requests``).

The analyzer's sources have no HTTP client yet; when ``analyzer/sources/prometheus.py`` lands the
digest can take any object with these two methods (:class:`PromQuery`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

import requests

from oximeter.errors import OximeterError

Labels = tuple[tuple[str, str], ...]


class PrometheusError(OximeterError):
    """The query failed (unreachable, HTTP error, or Prometheus said ``error``)."""


@dataclass(frozen=True)
class Series:
    """One result series: labels and ``(epoch seconds, value)`` points."""

    labels: Labels
    points: tuple[tuple[float, float], ...]

    def label(self, name: str, default: str = "") -> str:
        """One label's value."""
        return dict(self.labels).get(name, default)

    @property
    def last(self) -> float:
        """The last value (NaN when empty)."""
        return self.points[-1][1] if self.points else math.nan


class PromQuery(Protocol):
    """What the digest needs from a metrics store."""

    def instant(self, expr: str, at: datetime) -> list[Series]:
        """``/api/v1/query`` at ``at``."""
        ...

    def range(self, expr: str, start: datetime, end: datetime, step_s: float) -> list[Series]:
        """``/api/v1/query_range``."""
        ...


def _series(result: list[dict[str, Any]], key: str) -> list[Series]:
    out = []
    for item in result:
        labels = tuple(sorted(item.get("metric", {}).items()))
        raw = item.get(key)
        rows: list[list[Any]] = [] if raw is None else [raw] if key == "value" else raw
        out.append(Series(labels, tuple((float(t), float(v)) for t, v in rows)))
    return sorted(out, key=lambda s: s.labels)


class PrometheusClient:
    """Queries one Prometheus-compatible server (Prometheus, VictoriaMetrics, Thanos, Mimir)."""

    def __init__(self, url: str, timeout_s: float = 30.0, session: requests.Session | None = None) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self.session = session or requests.Session()
        self.session.trust_env = False  # localhost by default: never through a proxy

    def _get(self, path: str, params: dict[str, str]) -> dict[str, Any]:
        try:
            reply = self.session.get(f"{self.url}{path}", params=params, timeout=self.timeout_s)
            body: dict[str, Any] = reply.json()
        except (requests.RequestException, ValueError) as exc:
            raise PrometheusError(f"{path}: {type(exc).__name__}: {exc}") from None
        if reply.status_code != 200 or body.get("status") != "success":
            raise PrometheusError(f"{path}: HTTP {reply.status_code}: {body.get('error', 'no error text')}")
        data: dict[str, Any] = body["data"]
        return data

    def instant(self, expr: str, at: datetime) -> list[Series]:
        """The instant vector (or scalar) of ``expr`` at ``at``."""
        data = self._get("/api/v1/query", {"query": expr, "time": f"{at.timestamp():.3f}"})
        if data["resultType"] == "scalar":
            return [Series((), ((float(data["result"][0]), float(data["result"][1])),))]
        return _series(data["result"], "value")

    def range(self, expr: str, start: datetime, end: datetime, step_s: float) -> list[Series]:
        """The range result of ``expr`` over ``[start, end]``."""
        data = self._get("/api/v1/query_range", {"query": expr, "start": f"{start.timestamp():.3f}",
                                                 "end": f"{end.timestamp():.3f}", "step": f"{step_s:g}"})
        return _series(data["result"], "values")


def counter_increase(values: Sequence[float]) -> float:
    """Exact increase of a counter over consecutive samples: positive steps, a reset counts from 0."""
    total = 0.0
    for before, after in itertools.pairwise(values):
        total += after - before if after >= before else after
    return total
