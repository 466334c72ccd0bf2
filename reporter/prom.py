"""What the digest asks of a metrics store (:class:`PromQuery`), the shared Prometheus client
configured from the digest's settings, and the exact increase of a counter's samples."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

import numpy as np
import requests

from analyzer.signals.rolling import counter_steps
from oximeter.prometheus import PrometheusClient, Series
from oximeter.secrets import read_secret

if TYPE_CHECKING:
    from reporter.settings import DigestSettings


class PromQuery(Protocol):
    """What the digest needs from a metrics store."""

    def instant(self, expr: str, at: datetime) -> list[Series]:
        """``/api/v1/query`` at ``at``."""
        ...

    def range(self, expr: str, start: datetime, end: datetime, step_s: float) -> list[Series]:
        """``/api/v1/query_range``."""
        ...


def digest_client(settings: DigestSettings, url: str | None = None) -> PrometheusClient:
    """The client the digest queries through (``url`` overrides the configured one)."""
    token_env, tenant_env = settings.prometheus_bearer_token_env, settings.prometheus_tenant_env
    session = requests.Session()
    session.trust_env = False  # localhost by default: never through a proxy
    return PrometheusClient(url or settings.prometheus_url, timeout_s=settings.query_timeout_s,
                            token=read_secret(token_env) if token_env else None,
                            verify=settings.prometheus_tls_verify, session=session,
                            tenant=read_secret(tenant_env) if tenant_env else None)



def increases(series: Iterable[Series]) -> list[tuple[dict[str, str], float]]:
    """Each series' exact increase over its points (a reset counts from 0)."""
    return [(dict(s.labels), float(counter_steps(np.array([v for _, v in s.points], dtype=np.float64)).sum()))
            for s in series]
