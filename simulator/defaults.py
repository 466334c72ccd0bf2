"""The simulated fleet's defaults, in one place: ``oximeter sim serve``'s settings, scenario files,
histories and the local stacks (the demo, the end-to-end tests) all read them.

The engine's timing and capacity are ``EngineParams``' defaults (``simulator/engine.py``); the
gateway in front of each engine is the product's (``gateway/settings.py``). What differs on
purpose says so where it differs: a history's coarser engine iterations in
``simulator/scenario.py``, a scenario's own gateway limits in its file.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from simulator.engine import EngineParams

ENGINE = EngineParams()
NODES = 2
GPUS_PER_NODE = 4
# Fewer GPUs per node on a local stack: its backfilled history and its scrapes stay light.
STACK_GPUS_PER_NODE = 2
MODEL = "sim-llama-3-8b"
SERVICE = "chat"
# Seconds a request waits on the simulated vector DB when its response cache misses (0 switches
# the step off).
DEPENDENCY_LATENCY_S = 0.03
# The gateway limits the simulated fleets' traffic is sized for (12 of the engine's 16 batch slots,
# up to 10 s of queueing), run by the local stacks, their backfilled history and generated sweeps;
# the product's own defaults (gateway/settings.py) are stricter, and at a simulated evening peak
# they would reject requests and burn the fleet's error budget.
FLEET_GATEWAY: dict[str, float] = {"max_concurrency": 12, "max_queue_wait_s": 10.0}


class EngineKnobs(BaseModel):
    """The engine knobs ``oximeter sim serve`` (the ``sim:`` section and its flags) and a scenario
    file (its ``engine:``) both set, declared once with their defaults, bounds and descriptions."""

    model_config = ConfigDict(extra="forbid")

    max_num_seqs: int = Field(ENGINE.max_num_seqs, ge=1, description=(
        "Continuous-batching limit (vLLM's --max-num-seqs): most sequences one engine runs at once."))
    prefill_s_per_token: float = Field(ENGINE.prefill_s_per_token, ge=0, description=(
        "Seconds of prefill per uncached prompt token: at batch size 1 a request's service time is "
        "about prefill_s_per_token × prompt tokens + max_tokens × decode_s_per_token."))
    decode_s_per_token: float = Field(ENGINE.decode_s_per_token, ge=0, description=(
        "Seconds per decode iteration (one output token) at batch size 1."))
    decode_batch_factor: float = Field(ENGINE.decode_batch_factor, ge=0, description=(
        "Extra decode time per additional running sequence, as a fraction of decode_s_per_token (0: none)."))
    kv_blocks: int = Field(ENGINE.kv_blocks, ge=1, description=(
        "KV-cache blocks per engine; running sequences hold blocks, and a new one waits while the cache "
        "is full."))
    block_tokens: int = Field(ENGINE.block_tokens, ge=1, description=(
        "Tokens per KV-cache block: a sequence holds ceil(its tokens / block_tokens) blocks."))
    prefix_hit_rate: float = Field(ENGINE.prefix_hit_rate, ge=0, le=1, description=(
        "Share of prompt tokens found in the prefix cache when healthy (0 to 1); an injected "
        "prefix_cache_drop fault overrides it."))
    dependency_latency_s: float = Field(DEPENDENCY_LATENCY_S, ge=0, description=(
        "Seconds a request waits on the simulated vector DB when its response cache misses; 0 switches "
        "the step off (requests then reach the engine at once)."))

    def engine_params(self, **extra: int) -> EngineParams:
        """The engine these knobs describe (``extra``: the engine's other parameters, e.g. a
        history's coarser iterations); the vector-DB latency is the fleet's, not the engine's."""
        return EngineParams(max_num_seqs=self.max_num_seqs, prefill_s_per_token=self.prefill_s_per_token,
                            decode_s_per_token=self.decode_s_per_token,
                            decode_batch_factor=self.decode_batch_factor, kv_blocks=self.kv_blocks,
                            block_tokens=self.block_tokens, prefix_hit_rate=self.prefix_hit_rate, **extra)
