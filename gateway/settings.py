"""Settings of ``oximeter gateway`` (the ``gateway:`` section; CLI flags override them)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class GatewaySettings(BaseModel):
    """One gateway in front of one engine replica (a sidecar)."""

    model_config = ConfigDict(extra="forbid")

    upstream: str = "http://127.0.0.1:8100"
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=0, le=65535)  # 0: the kernel picks one
    service: str = "llm"
    node: str = "local"
    # Bounded label values (a label with unbounded values would explode the series count): anything
    # else becomes "other".
    models: list[str] = Field(default_factory=list)
    max_concurrency: int = Field(8, ge=1)
    max_queue: int = Field(64, ge=0)
    max_queue_wait_s: float = Field(5.0, gt=0)
    first_byte_timeout_s: float = Field(30.0, gt=0)
    stream_idle_timeout_s: float = Field(30.0, gt=0)
    max_body_bytes: int = Field(1 << 20, ge=1024)
    # Slow clients: request line and headers must arrive within header_timeout_s (from the
    # connection, or from the next request's first byte), the body within body_timeout_s, and a
    # kept-alive connection may idle idle_timeout_s between requests; then it is closed.
    header_timeout_s: float = Field(10.0, gt=0)
    body_timeout_s: float = Field(30.0, gt=0)
    idle_timeout_s: float = Field(75.0, gt=0)
    max_connections_per_client: int = Field(256, ge=1)  # per client address; beyond it 429 and close
    # Ceilings answered 400 at the gateway, before admission: a request the engine would only
    # refuse (or spend minutes on) never takes a slot.
    max_tokens_limit: int = Field(131072, ge=1)  # max_tokens / max_completion_tokens
    max_prompt_chars: int = Field(1_000_000, ge=1)  # prompt text, or all message contents together
    # A request whose Idempotency-Key (else client-chosen X-Request-ID) was seen this many seconds
    # ago or less is counted as a retry (oximeter_retried_requests_total).
    retry_window_s: float = Field(10.0, gt=0)
    warmup: bool = True
