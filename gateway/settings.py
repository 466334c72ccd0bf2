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

    # Base URL of the engine replica this gateway forwards to (the simulator's first engine by default).
    upstream: str = "http://127.0.0.1:8100"
    # Address the gateway listens on; loopback by default, so nothing outside the host reaches it.
    host: str = "127.0.0.1"
    port: int = bounded(8000, ge=0, le=65535)  # 0: the kernel picks one
    # Value of the ``service`` label on every series the gateway exports.
    service: str = "llm"
    # Value of the ``node`` label on every series the gateway exports (the host the replica runs on).
    node: str = "local"
    # Bounded label values (a label with unbounded values would explode the series count): anything
    # else becomes "other".
    models: tuple[str, ...] = ()
    # Most requests forwarded to the engine at once; the rest wait in the gateway's queue.
    max_concurrency: int = bounded(8, ge=1)
    # Most requests waiting for a slot; one more is answered 429 at once (0: no queue).
    max_queue: int = bounded(64, ge=0)
    # Seconds: a request whose predicted wait for a slot is longer is answered 429 at once, not queued.
    max_queue_wait_s: float = bounded(5.0, gt=0)
    # Seconds for the engine's first byte (and each warm-up attempt); then 504 and the request is aborted.
    first_byte_timeout_s: float = bounded(30.0, gt=0)
    # Seconds allowed between two streamed chunks; then an SSE error event and the request is aborted.
    stream_idle_timeout_s: float = bounded(30.0, gt=0)
    # Bytes: a larger request body is answered 413 (default 1 MiB).
    max_body_bytes: int = bounded(1 << 20, ge=1024)
    # Slow clients: request line and headers must arrive within header_timeout_s (from the
    # connection, or from the next request's first byte), the body within body_timeout_s, and a
    # kept-alive connection may idle idle_timeout_s between requests; then it is closed.
    header_timeout_s: float = bounded(10.0, gt=0)
    # Seconds for a request's whole body to arrive after its headers; then 408.
    body_timeout_s: float = bounded(30.0, gt=0)
    # Seconds a kept-alive connection may idle between requests; then it is closed.
    idle_timeout_s: float = bounded(75.0, gt=0)
    max_connections_per_client: int = bounded(256, ge=1)  # per client address; beyond it 429 and close
    # Ceilings answered 400 at the gateway, before admission: a request the engine would only
    # refuse (or spend minutes on) never takes a slot.
    max_tokens_limit: int = bounded(131072, ge=1)  # max_tokens / max_completion_tokens
    max_prompt_chars: int = bounded(1_000_000, ge=1)  # prompt text, or all message contents together
    # A request whose Idempotency-Key (else client-chosen X-Request-ID) was seen this many seconds
    # ago or less is counted as a retry (oximeter_retried_requests_total).
    retry_window_s: float = bounded(10.0, gt=0)
    # Report ready (/health/ready) only after one real request went through the engine; false: ready at once.
    warmup: bool = True

    def __post_init__(self) -> None:
        check_fields(self)
