"""Where the analyzer reads from (the ``analyzer.prometheus`` section): light, so reading the
configuration imports no data stack."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class PrometheusSettings(BaseModel):
    """Where the analyzer reads from: any Prometheus-HTTP-API store (Prometheus, Thanos, Mimir, VM)."""

    model_config = ConfigDict(extra="forbid")

    # Base URL of the store the analyzer queries.
    url: str = "http://127.0.0.1:9090"
    # Seconds one HTTP request to the store may take.
    timeout_s: float = Field(30.0, gt=0)
    # Times a request that failed transiently is tried again (with backoff) before the read fails.
    retries: int = Field(3, ge=0)
    # Name of the env var (or ``<NAME>_FILE``) holding a bearer token; never the token itself.
    bearer_token_env: str | None = None
    # Name of the env var (or ``<NAME>_FILE``) holding the tenant a multi-tenant store answers for,
    # sent as the X-Scope-OrgID header (Mimir, Cortex; "a|b" federates tenants where enabled).
    tenant_env: str | None = None
    # True, False, or a CA bundle path.
    tls_verify: bool | str = True
    # Read a signal's recording rule where the store evaluates it (cheaper), else its raw PromQL;
    # false: always the PromQL.
    use_recording_rules: bool = True
