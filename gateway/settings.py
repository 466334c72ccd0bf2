"""Settings of ``oximeter gateway`` (the ``gateway:`` section; CLI flags override them)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class GatewaySettings(BaseModel):
    """One gateway in front of one engine replica (a sidecar)."""

    model_config = ConfigDict(extra="forbid")

    upstream: str = Field("http://127.0.0.1:8100", description="base URL of the engine this gateway fronts")
    host: str = Field("127.0.0.1", description="address to listen on")
    port: int = Field(8000, ge=1, le=65535, description="port to listen on")
    service: str = Field("llm", description="value of the `service` label on every metric")
    node: str = Field("local", description="value of the `node` label: the host the engine runs on")
    # Label values stay bounded: a model not listed is counted as "other".
    models: list[str] = Field(default_factory=list, description=(
        "model names allowed as the `model` label; any other becomes `other` (empty: the upstream's "
        "/v1/models at start-up)"))
    max_concurrency: int = Field(8, ge=1, description="most requests sent upstream at once; the rest wait")
    max_queue: int = Field(64, ge=0, description="most requests waiting; beyond it the gateway answers 429")
    max_queue_wait_s: float = Field(5.0, gt=0, description=(
        "seconds; a request whose predicted wait is longer gets 429 with Retry-After at once"))
    first_byte_timeout_s: float = Field(30.0, gt=0, description=(
        "seconds to the upstream's first byte; then 504 and the upstream request is aborted"))
    stream_idle_timeout_s: float = Field(30.0, gt=0, description=(
        "seconds between two chunks of a stream; then an error event and the upstream is aborted"))
    max_body_bytes: int = Field(1 << 20, ge=1024, description="larger request bodies get 413")
    warmup: bool = Field(True, description="send one request upstream before reporting ready")
