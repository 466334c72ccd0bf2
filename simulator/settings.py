"""Settings of ``oximeter sim serve`` (the ``sim:`` section; CLI flags override them)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from simulator.defaults import DEPENDENCY_LATENCY_S, ENGINE, GPUS_PER_NODE, MODEL, NODES


class SimSettings(BaseModel):
    """The simulated fleet: N nodes × M GPUs, one engine per node on consecutive ports."""

    model_config = ConfigDict(extra="forbid")

    # Address the simulated engines listen on; loopback by default, so nothing outside the host reaches them.
    host: str = "127.0.0.1"
    port: int = Field(8100, ge=0, le=65535)  # 0: each engine on a port the kernel picks
    # Number of simulated nodes, one engine each; node i listens on port + i - 1.
    nodes: int = Field(NODES, ge=1)
    # Simulated GPUs per node (what the exporter's sim backend reports).
    gpus_per_node: int = Field(GPUS_PER_NODE, ge=1)
    # Continuous-batching limit (vLLM's --max-num-seqs): most sequences one engine runs at once.
    max_num_seqs: int = Field(ENGINE.max_num_seqs, ge=1)
    # Model name the engines serve and report in the ``model_name`` label.
    model: str = MODEL
    # Random seed of the GPU identities and noise: the same seed gives the same fleet.
    seed: int = 0
    # Engine timing (see simulator/engine.py): one request's service time is about
    # prefill_s_per_token × prompt tokens + max_tokens × decode_s_per_token at batch size 1.
    prefill_s_per_token: float = Field(ENGINE.prefill_s_per_token, ge=0)
    # Seconds per decode iteration (one output token) at batch size 1.
    decode_s_per_token: float = Field(ENGINE.decode_s_per_token, ge=0)
    # Extra decode time per additional running sequence, as a fraction of decode_s_per_token (0: none).
    decode_batch_factor: float = Field(ENGINE.decode_batch_factor, ge=0)
    # KV-cache blocks per engine; running sequences hold blocks, and a new one waits while the cache is full.
    kv_blocks: int = Field(ENGINE.kv_blocks, ge=1)
    # Tokens per KV-cache block: a sequence holds ceil(its tokens / block_tokens) blocks.
    block_tokens: int = Field(ENGINE.block_tokens, ge=1)
    # Share of prompt tokens found in the prefix cache when healthy (0 to 1); an injected
    # prefix_cache_drop fault overrides it.
    prefix_hit_rate: float = Field(ENGINE.prefix_hit_rate, ge=0, le=1)
    # Output tokens of a request that sets no max_tokens.
    default_output_tokens: int = Field(32, ge=1)
    # 0 switches the simulated vector-DB step off (requests then reach the engine at once).
    dependency_latency_s: float = Field(DEPENDENCY_LATENCY_S, ge=0)
    # "stock": engines serve only vLLM's own series (the simulated vector DB's stay unexported), as
    # on a fleet without Oximeter (a history's ``telemetry: stock`` does the same).
    telemetry: Literal["oximeter", "stock"] = "oximeter"
