"""A child started at a niceness yields the CPU: it and what it starts run at that niceness, and so
does its session where the kernel shares the CPU between sessions first (autogroups)."""

from __future__ import annotations

import errno
import os
import sys
from pathlib import Path

import psutil
import pytest

from stack.procs import ManagedProcess, lower_session_priority, wait_until

# A parent that starts one child and waits: the engine's shape (an API server and its core).
PARENT = "import subprocess, sys; subprocess.run([sys.executable, '-c', 'import time; time.sleep(60)'])"


def _autogroup(pid: int) -> str | None:
    path = Path(f"/proc/{pid}/autogroup")
    return path.read_text(encoding="ascii").strip() if path.exists() else None


def test_a_niced_child_and_its_children_yield_in_their_own_session(tmp_path: Path) -> None:
    with ManagedProcess("niced", [sys.executable, "-c", PARENT], tmp_path, niceness=10) as proc:
        assert proc.proc is not None
        parent = psutil.Process(proc.proc.pid)
        child = wait_until(lambda: next(iter(parent.children()), None), 30.0, what="the child")
        assert isinstance(child, psutil.Process)
        # ``nice -n`` adds to the niceness it is started at (a suite run under ``nice`` starts higher).
        expected = min(19, psutil.Process().nice() + 10)
        for process in (parent, child):
            assert process.nice() == expected
        group = _autogroup(parent.pid)
        if group is not None:  # a kernel without autogroups has only the processes' niceness
            assert group.endswith("nice 10"), group
            assert _autogroup(child.pid) == group
            assert group != _autogroup(psutil.Process().pid), "the child shares the test's session"


def test_a_child_at_the_default_niceness_is_left_alone(tmp_path: Path) -> None:
    with ManagedProcess("plain", [sys.executable, "-c", "import time; time.sleep(60)"], tmp_path) as proc:
        assert proc.proc is not None
        assert psutil.Process(proc.proc.pid).nice() == psutil.Process().nice()
        group = _autogroup(proc.proc.pid)
        assert group is None or group.endswith("nice 0"), group


def test_a_session_niceness_refused_for_its_rate_is_tried_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without CAP_SYS_ADMIN the kernel takes one autogroup change per tenth of a second and answers
    EAGAIN in between: tried again, it lands; any other refusal is final at once."""
    tries: list[str] = []

    def write(answers: list[int]) -> object:
        def write_text(self: Path, data: str, encoding: str | None = None) -> int:
            tries.append(data)
            if answers:
                code = answers.pop(0)
                raise OSError(code, os.strerror(code))
            return len(data)
        return write_text

    monkeypatch.setattr(Path, "write_text", write([errno.EAGAIN, errno.EAGAIN]))
    assert lower_session_priority(1, 10) is True
    assert tries == ["10", "10", "10"]
    tries.clear()
    monkeypatch.setattr(Path, "write_text", write([errno.EPERM, errno.EAGAIN]))
    assert lower_session_priority(1, 10) is False
    assert tries == ["10"]
