"""Fixtures for simulator tests."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from stack.procs import ManagedProcess
from tests.simulator.sim_harness import TOKEN, Sim, StartSim, start_sim_process


@pytest.fixture
def start_sim(start_process: Callable[..., ManagedProcess], tmp_path: Path) -> StartSim:
    """Start a simulator with extra CLI flags; stopped at teardown by ``start_process``."""

    def start(*extra: str, nodes: int = 2, token: str | None = TOKEN) -> Sim:
        return start_sim_process(start_process, tmp_path / "sim.port", *extra, nodes=nodes, token=token)

    return start
