"""Settings of ``oximeter sim serve`` (the ``sim:`` section; CLI flags override them)."""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field

from simulator.defaults import GPUS_PER_NODE, MODEL, NODES, EngineKnobs


class SimSettings(EngineKnobs):
    """The simulated fleet: N nodes × M GPUs, one engine per node on consecutive ports; the engine
    knobs are the ones a scenario file's ``engine:`` sets."""

    model_config = ConfigDict(extra="forbid")

    # Address the simulated engines listen on; loopback by default, so nothing outside the host reaches them.
    host: str = "127.0.0.1"
    port: int = Field(8100, ge=0, le=65535)  # 0: each engine on a port the kernel picks
    # Number of simulated nodes, one engine each; node i listens on port + i - 1.
    nodes: int = Field(NODES, ge=1)
    # Simulated GPUs per node (what the exporter's sim backend reports).
    gpus_per_node: int = Field(GPUS_PER_NODE, ge=1)
    # Model name the engines serve and report in the ``model_name`` label.
    model: str = MODEL
    # Random seed of the GPU identities and noise: the same seed gives the same fleet.
    seed: int = 0
    # Output tokens of a request that sets no max_tokens.
    default_output_tokens: int = Field(32, ge=1)
    # "stock": engines serve only vLLM's own series (the simulated vector DB's stay unexported), as
    # on a fleet without Oximeter (a history's ``telemetry: stock`` does the same).
    telemetry: Literal["oximeter", "stock"] = "oximeter"
