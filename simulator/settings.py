"""Settings of ``oximeter sim serve`` (the ``sim:`` section; CLI flags override them)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class SimSettings(BaseModel):
    """The simulated fleet: N nodes × M GPUs, one engine per node on consecutive ports."""

    model_config = ConfigDict(extra="forbid")

    host: str = "127.0.0.1"
    port: int = Field(8100, ge=1, le=65535)
    nodes: int = Field(2, ge=1)
    gpus_per_node: int = Field(4, ge=1)
    max_num_seqs: int = Field(16, ge=1)
    model: str = "sim-llama-3-8b"
    seed: int = 0
