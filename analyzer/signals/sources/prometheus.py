"""The Prometheus source: range queries over the Prometheus HTTP API, for Prometheus, Thanos,
Mimir or VictoriaMetrics alike.

One query per signal returns the whole metric family (never one query per series), on a
step-aligned grid, split so that no request asks for 11,000 points per series or more. A signal's
recording rule is read when the store evaluates that rule (its rules API says so, re-read every
few minutes), else its raw PromQL: a rule that has produced no sample yet (a fresh Prometheus, no
traffic) is still the right query. Where the store has no rules API, the data decide: the rule's
series if it has any, else the raw PromQL, remembered. Connection errors and 5xx answers are
retried with exponential back-off by the shared client (oximeter/prometheus.py).
"""

from __future__ import annotations

import math
import time
from collections.abc import Hashable
from datetime import UTC, datetime, timedelta

import numpy as np
import pandas as pd
import requests
from pydantic import SecretStr

from analyzer.signals.frame import SeriesFrame
from analyzer.signals.label_value import as_values
from analyzer.signals.sources.base import align, grid_index
from analyzer.signals.sources.matrix import decode_matrix
from analyzer.signals.sources.prometheus_settings import PrometheusSettings
from analyzer.signals.spec import SignalSpec
from oximeter.errors import DependencyError
from oximeter.prometheus import PrometheusClient, RetryableError
from oximeter.promql import with_matchers
from oximeter.secrets import read_secret

MAX_POINTS = 11_000  # Prometheus refuses range queries of more points per series
RULES_REFRESH_S = 300.0  # how long the store's list of recording rules is trusted


class PrometheusSource:
    """Signals from any Prometheus-HTTP-API store."""

    def __init__(self, url: str, *, timeout_s: float = 30.0, retries: int = 3,
                 token: SecretStr | None = None, verify: bool | str = True,
                 use_recording_rules: bool = True, max_points: int = MAX_POINTS,
                 session: requests.Session | None = None, backoff_s: float = 0.5, selector: str = "",
                 tenant: SecretStr | None = None) -> None:
        self.http = PrometheusClient(url, timeout_s=timeout_s, retries=retries, token=token, verify=verify,
                                     session=session, backoff_s=backoff_s, tenant=tenant)
        self.use_recording_rules = use_recording_rules
        self.max_points = max_points
        # A shard's label matchers, added to every selector of every query (analyzer.ha.selector).
        self.selector = selector
        # Without a rules API: signal name → the query that answered (rule or raw), found once.
        self.chosen: dict[str, str] = {}
        self._rules: frozenset[str] | None = None
        self._rules_read_at: float | None = None

    @classmethod
    def from_settings(cls, settings: PrometheusSettings, selector: str = "") -> PrometheusSource:
        """A source configured by the ``analyzer.prometheus`` section (token from its env var),
        reading the part of the fleet ``selector`` matches."""
        token = read_secret(settings.bearer_token_env) if settings.bearer_token_env else None
        tenant = read_secret(settings.tenant_env) if settings.tenant_env else None
        return cls(settings.url, timeout_s=settings.timeout_s, retries=settings.retries, token=token,
                   verify=settings.tls_verify, use_recording_rules=settings.use_recording_rules,
                   selector=selector, tenant=tenant)

    def now(self) -> datetime:
        """Wall-clock time."""
        return datetime.now(UTC)

    def query_key(self, spec: SignalSpec) -> Hashable:
        """What ``spec``'s answer depends on: the query (its recording rule, its raw PromQL)."""
        return (spec.record if self.use_recording_rules else None, spec.promql)

    def fetch(self, spec: SignalSpec, start: datetime, end: datetime, step_s: float) -> SeriesFrame:
        """``spec`` on the aligned grid [start, end], one family-wide query per chunk."""
        return as_values(spec, self._fetch(spec, start, end, step_s))

    def _fetch(self, spec: SignalSpec, start: datetime, end: datetime, step_s: float) -> SeriesFrame:
        grid = grid_index(start, end, step_s)
        if not (self.use_recording_rules and spec.record):
            return self._frame(spec.promql, grid, step_s)
        rules = self.recording_rules()
        if rules is not None:
            return self._frame(spec.record if spec.record in rules else spec.promql, grid, step_s)
        known = self.chosen.get(spec.name)
        if known is not None:
            return self._frame(known, grid, step_s)
        candidates = [spec.record]
        candidates.append(spec.promql)
        frame = SeriesFrame(pd.DataFrame(index=grid, dtype=np.float32), {})
        for query in candidates:
            assert query is not None
            frame = self._frame(query, grid, step_s)
            if not frame.values.columns.empty:
                self.chosen[spec.name] = query
                break
        return frame

    def recording_rules(self) -> frozenset[str] | None:
        """The names of the recording rules the store evaluates, or None where it has no rules API
        (read once per ``RULES_REFRESH_S``; one try, as the queries that follow report an outage)."""
        now = time.monotonic()
        if self._rules_read_at is not None and now - self._rules_read_at < RULES_REFRESH_S:
            return self._rules
        try:
            data = self.http.call_once("GET", "/api/v1/rules", {"type": "record"})
        except RetryableError:
            return self._rules  # unreachable now: the last answer stands, asked again next time
        except DependencyError:
            data = None  # 404, not JSON, not success: no rules API here
        self._rules_read_at = now
        self._rules = None if data is None else frozenset(
            str(rule.get("name")) for group in data.get("groups") or [] for rule in group.get("rules") or []
            if rule.get("type", "recording") == "recording")
        return self._rules

    def _frame(self, query: str, grid: pd.DatetimeIndex, step_s: float) -> SeriesFrame:
        query = with_matchers(query, self.selector)
        per_chunk = self.max_points - 1
        chunks = (grid[lo:lo + per_chunk] for lo in range(0, len(grid), per_chunk))
        return decode_matrix((self.http.matrix(query, c[0], c[-1], step_s) for c in chunks), grid, step_s)


def same_time_window(lag_s: float, live_start: datetime, live_end: datetime, half_s: float,
                     step_s: float) -> tuple[datetime, datetime]:
    """The [start, end] to fetch ``lag_s`` back for a live window, widened by ``half_s`` both
    ways and step-aligned (what a seasonal baseline needs, and no more)."""
    lag = timedelta(seconds=lag_s)
    start = align(live_start - lag - timedelta(seconds=half_s), step_s)
    end = align(live_end - lag + timedelta(seconds=half_s) + timedelta(seconds=step_s - 1e-6), step_s)
    return start, end


def points_per_series(start: datetime, end: datetime, step_s: float) -> int:
    """How many points a range query over [start, end] returns per series."""
    return math.floor((end - start).total_seconds() / step_s) + 1
