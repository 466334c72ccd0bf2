"""Settings of ``oximeter sim serve`` (the ``sim:`` section; CLI flags override them)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class SimSettings(BaseModel):
    """The simulated fleet: N nodes × M GPUs, one engine per node on consecutive ports."""

    model_config = ConfigDict(extra="forbid")

    host: str = "127.0.0.1"
    port: int = Field(8100, ge=0, le=65535)  # 0: each engine on a port the kernel picks
    nodes: int = Field(2, ge=1)
    gpus_per_node: int = Field(4, ge=1)
    max_num_seqs: int = Field(16, ge=1)
    model: str = "sim-llama-3-8b"
    seed: int = 0
    # Engine timing (see simulator/engine.py): one request's service time is about
    # prefill_s_per_token × prompt tokens + max_tokens × decode_s_per_token at batch size 1.
    prefill_s_per_token: float = Field(0.0001, ge=0)
    decode_s_per_token: float = Field(0.02, ge=0)
    decode_batch_factor: float = Field(0.02, ge=0)
    kv_blocks: int = Field(1024, ge=1)
    block_tokens: int = Field(16, ge=1)
    prefix_hit_rate: float = Field(0.5, ge=0, le=1)
    default_output_tokens: int = Field(32, ge=1)
    # 0 switches the simulated vector-DB step off (requests then reach the engine at once).
    dependency_latency_s: float = Field(0.0, ge=0)
    # "stock": engines serve only vLLM's own series (the simulated vector DB's stay unexported), as
    # on a fleet without Oximeter (a history's ``telemetry: stock`` does the same).
    telemetry: Literal["oximeter", "stock"] = "oximeter"
