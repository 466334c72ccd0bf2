"""The session's real vLLM engine (the pinned CPU build, ``stack/vllm/``), started once on first use and
always stopped. Every test here shares one pytest-xdist worker (tests/conftest.py), so one engine
serves them all."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from vllm_load import SPEC

from stack.ports import reserve_port
from stack.vllm.engine import VllmEngine
from stack.vllm.env import ensure_env, ensure_model


@pytest.fixture(scope="session")
def vllm_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmEngine]:
    """One engine on the tiny model (``make test`` builds its environment first), on a port reserved
    for the session: the crash test restarts it there, and the stacks watching it find it again."""
    env = ensure_env()
    with reserve_port() as port, VllmEngine("vllm", env, ensure_model(env), tmp_path_factory.mktemp("vllm"),
                                            SPEC, port) as engine:
        yield engine
