"""Settings of ``oximeter sim serve`` (the ``sim:`` section; CLI flags override them)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class SimSettings(BaseModel):
    """The simulated fleet: N nodes × M GPUs, one engine per node on consecutive ports."""

    model_config = ConfigDict(extra="forbid")

    host: str = Field("127.0.0.1", description="bind address")
    port: int = Field(8100, ge=1, le=65535, description="port of node n1's engine; node i on port+i-1")
    nodes: int = Field(2, ge=1, description="number of simulated nodes (one engine each)")
    gpus_per_node: int = Field(4, ge=1, description="simulated GPUs per node")
    max_num_seqs: int = Field(16, ge=1, description="continuous-batching limit per engine")
    model: str = Field("sim-llama-3-8b", description="model name served and reported as model_name")
    seed: int = Field(0, description="random seed (GPU identities, noise)")
    # Engine timing (see simulator/engine.py): one request's service time is about
    # prefill_s_per_token × prompt tokens + max_tokens × decode_s_per_token at batch size 1.
    prefill_s_per_token: float = Field(0.0001, ge=0, description="prefill seconds per uncached prompt token")
    decode_s_per_token: float = Field(0.02, ge=0, description=(
        "seconds per decode iteration at batch size 1 (max_tokens=20 at 0.1 is ~2 s)"))
    decode_batch_factor: float = Field(0.02, ge=0, description=(
        "extra decode time per additional running sequence (0 = batch-independent)"))
    kv_blocks: int = Field(1024, ge=1, description="KV-cache blocks per engine")
    block_tokens: int = Field(16, ge=1, description="tokens per KV block")
    prefix_hit_rate: float = Field(0.5, ge=0, le=1, description="prefix-cache hit rate when healthy (0-1)")
    default_output_tokens: int = Field(32, ge=1, description="output length without max_tokens")
    dependency_latency_s: float = Field(0.0, ge=0, description=(
        "simulated vector-DB latency on a cache miss (0 = no dependency step: requests reach the "
        "engine at once)"))
