"""Settings of ``oximeter gateway`` (the ``gateway:`` section; CLI flags override them).

A frozen standard-library dataclass, not pydantic: the gateway is a sidecar on every engine's
request path and starts without pydantic's import. ``oximeter/plain_settings.py`` checks the types
and the bounds; ``oximeter config check`` embeds this class in its pydantic model, which reads the
same bounds from the fields' metadata.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from oximeter.plain_settings import bounded, check_fields


@dataclass(frozen=True)
class GatewaySettings:
    """One gateway in front of one engine replica (a sidecar)."""

    __pydantic_config__: ClassVar[dict[str, Any]] = {"extra": "forbid"}

    upstream: str = "http://127.0.0.1:8100"
    host: str = "127.0.0.1"
    port: int = bounded(8000, ge=0, le=65535)  # 0: the kernel picks one
    service: str = "llm"
    node: str = "local"
    # Bounded label values (a label with unbounded values would explode the series count): anything
    # else becomes "other".
    models: tuple[str, ...] = ()
    max_concurrency: int = bounded(8, ge=1)
    max_queue: int = bounded(64, ge=0)
    max_queue_wait_s: float = bounded(5.0, gt=0)
    first_byte_timeout_s: float = bounded(30.0, gt=0)
    stream_idle_timeout_s: float = bounded(30.0, gt=0)
    max_body_bytes: int = bounded(1 << 20, ge=1024)
    # Slow clients: request line and headers must arrive within header_timeout_s (from the
    # connection, or from the next request's first byte), the body within body_timeout_s, and a
    # kept-alive connection may idle idle_timeout_s between requests; then it is closed.
    header_timeout_s: float = bounded(10.0, gt=0)
    body_timeout_s: float = bounded(30.0, gt=0)
    idle_timeout_s: float = bounded(75.0, gt=0)
    max_connections_per_client: int = bounded(256, ge=1)  # per client address; beyond it 429 and close
    # Ceilings answered 400 at the gateway, before admission: a request the engine would only
    # refuse (or spend minutes on) never takes a slot.
    max_tokens_limit: int = bounded(131072, ge=1)  # max_tokens / max_completion_tokens
    max_prompt_chars: int = bounded(1_000_000, ge=1)  # prompt text, or all message contents together
    # A request whose Idempotency-Key (else client-chosen X-Request-ID) was seen this many seconds
    # ago or less is counted as a retry (oximeter_retried_requests_total).
    retry_window_s: float = bounded(10.0, gt=0)
    warmup: bool = True

    def __post_init__(self) -> None:
        check_fields(self)
