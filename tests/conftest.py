"""Shared fixtures: child processes on free ports, always stopped."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from oximeter.procs import ManagedProcess

StartProcess = Callable[..., ManagedProcess]


@pytest.fixture
def start_process(tmp_path: Path) -> Iterator[StartProcess]:
    """Start named child processes (logs under tmp_path); every one is stopped at teardown."""
    started: list[ManagedProcess] = []

    def start(name: str, argv: Sequence[str], *, env: dict[str, str] | None = None,
              cwd: Path | None = None) -> ManagedProcess:
        proc = ManagedProcess(name, argv, tmp_path / "logs", env=env, cwd=cwd).start()
        started.append(proc)
        return proc

    yield start
    for proc in reversed(started):
        proc.stop()
