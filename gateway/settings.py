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
    warmup: bool = True
