"""The one Prometheus HTTP API client (Prometheus, Thanos, Mimir, VictoriaMetrics alike), used
by the analyzer's source and the reporter's digest.

Queries are POSTed (long PromQL stays out of URLs and logs), with a bearer token when one is
configured, a tenant header (Mimir's ``X-Scope-OrgID``) when one is configured, and TLS
verification as configured. Connection errors, timeouts, 5xx and 429 answers
are retried with exponential back-off; the token and the tenant are never logged or put into
an error.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import requests
from pydantic import SecretStr
from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from oximeter.errors import DependencyError

Labels = tuple[tuple[str, str], ...]
TENANT_HEADER = "X-Scope-OrgID"  # the tenant a multi-tenant store (Mimir, Cortex) answers for


class RetryableError(Exception):
    """A failure worth retrying (connection, timeout, 5xx, 429)."""


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


def _series(result: list[dict[str, Any]], key: str) -> list[Series]:
    out = []
    for item in result:
        labels = tuple(sorted(item.get("metric", {}).items()))
        raw = item.get(key)
        rows: list[list[Any]] = [] if raw is None else [raw] if key == "value" else raw
        out.append(Series(labels, tuple((float(t), float(v)) for t, v in rows)))
    return sorted(out, key=lambda s: s.labels)


class PrometheusClient:
    """Calls one Prometheus-HTTP-API server."""

    def __init__(self, url: str, *, timeout_s: float = 30.0, retries: int = 3, token: SecretStr | None = None,
                 verify: bool | str = True, session: requests.Session | None = None,
                 backoff_s: float = 0.5, tenant: SecretStr | None = None) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self.retries = retries
        self.verify = verify
        self.backoff_s = backoff_s
        self.session = session or requests.Session()
        self._headers = {"Authorization": f"Bearer {token.get_secret_value()}"} if token else {}
        if tenant is not None:
            # Mimir's (and Cortex's) tenant, or tenants joined by "|" where it federates queries.
            self._headers[TENANT_HEADER] = tenant.get_secret_value()

    @property
    def where(self) -> str:
        """The URL without any ``user:password@`` part, for messages."""
        scheme, _, rest = self.url.partition("://")
        return f"{scheme}://{rest.rsplit('@', 1)[-1]}" if rest else self.url

    def post(self, path: str, form: Mapping[str, str]) -> dict[str, Any]:
        """``data`` of a POST to ``path``, retried with back-off; DependencyError once it gives up."""
        retrying = Retrying(
            stop=stop_after_attempt(self.retries + 1),
            wait=wait_exponential(multiplier=self.backoff_s, max=30),
            retry=retry_if_exception_type(RetryableError),
            reraise=True,
        )
        try:
            for attempt in retrying:
                with attempt:
                    return self.call_once("POST", path, form)
        except RetryableError as exc:
            tries = self.retries + 1
            raise DependencyError(f"prometheus at {self.where}{path}: failed after {tries} tries: {exc}") \
                from None
        raise AssertionError("unreachable")

    def call_once(self, method: str, path: str, form: Mapping[str, str]) -> dict[str, Any]:
        """``data`` of one request: RetryableError for what a retry may cure, DependencyError for
        an answer that is not a success (4xx, not JSON, ``status: error``)."""
        args: dict[str, Any] = {"data": form} if method == "POST" else {"params": form}
        try:
            resp = self.session.request(method, f"{self.url}{path}", headers=self._headers,
                                        timeout=self.timeout_s, verify=self.verify, **args)
        except (requests.ConnectionError, requests.Timeout) as exc:
            raise RetryableError(type(exc).__name__) from None
        if resp.status_code >= 500 or resp.status_code == 429:
            raise RetryableError(f"HTTP {resp.status_code}")
        try:
            body = resp.json()
        except ValueError:
            raise DependencyError(f"prometheus at {self.where}{path}: HTTP {resp.status_code}, not JSON") \
                from None
        if resp.status_code != 200 or body.get("status") != "success":
            error = str(body.get("error", ""))[:200]
            raise DependencyError(f"prometheus at {self.where}{path}: HTTP {resp.status_code}: {error}")
        return dict(body.get("data", {}))

    def instant(self, expr: str, at: datetime) -> list[Series]:
        """The instant vector (or scalar) of ``expr`` at ``at``."""
        data = self.post("/api/v1/query", {"query": expr, "time": f"{at.timestamp():.3f}"})
        if data["resultType"] == "scalar":
            return [Series((), ((float(data["result"][0]), float(data["result"][1])),))]
        return _series(data["result"], "value")

    def range(self, expr: str, start: datetime, end: datetime, step_s: float) -> list[Series]:
        """The range result of ``expr`` over ``[start, end]``."""
        return _series(self.matrix(expr, start, end, step_s), "values")

    def matrix(self, expr: str, start: datetime, end: datetime, step_s: float) -> list[Any]:
        """The raw ``result`` of a range query (a matrix, else DependencyError)."""
        form = {"query": expr, "start": f"{start.timestamp():.3f}", "end": f"{end.timestamp():.3f}",
                "step": f"{step_s:g}"}
        data = self.post("/api/v1/query_range", form)
        if data.get("resultType") != "matrix":
            raise DependencyError(f"prometheus: expected a matrix for {expr!r}, got {data.get('resultType')}")
        return list(data.get("result", []))
