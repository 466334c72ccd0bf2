"""Child processes, polled with deadlines and always stopped (their ports: ``stack/ports.py``).

Used by the demo and by the test fixtures, so both start servers the same way.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO

import requests
from loguru import logger

from oximeter.errors import OximeterError
from stack import reaper


class ProcessError(OximeterError):
    """A child process failed to start or to become ready in time."""


# How long an autogroup niceness refused for its rate (EAGAIN) is tried again: the kernel allows one
# change per tenth of a second.
AUTOGROUP_RETRY_S = 1.0


def wait_until(predicate: Callable[[], object], timeout_s: float, interval_s: float = 0.05,
               what: str = "condition") -> object:
    """Poll ``predicate`` until it returns a truthy value or ``timeout_s`` passes."""
    deadline = time.monotonic() + timeout_s
    last_exc: Exception | None = None
    while True:
        try:
            value = predicate()
            if value:
                return value
        except Exception as exc:  # noqa: BLE001 - polled predicates may fail until ready
            last_exc = exc
        if time.monotonic() >= deadline:
            detail = f": {last_exc!r}" if last_exc else ""
            raise TimeoutError(f"{what} not reached within {timeout_s:.1f}s{detail}")
        time.sleep(interval_s)


def http_ok(url: str, timeout_s: float = 1.0) -> bool:
    """True when GET ``url`` answers 2xx."""
    try:
        return requests.get(url, timeout=timeout_s).ok
    except requests.RequestException:
        return False


def lower_session_priority(pid: int, niceness: int) -> bool:
    """Give the session of ``pid`` (its autogroup) the scheduling niceness ``niceness``.

    Where the kernel groups tasks by session (``/proc/sys/kernel/sched_autogroup_enabled``, on by
    default in most distributions' kernels), the CPU is shared between sessions first, each at its
    autogroup's niceness, and a process's own niceness only ranks it inside its session. A child in
    a session of its own at ``nice`` 10 would still take as much CPU as any other session. False when
    the kernel has no autogroups (``nice`` alone then does the job) or refuses the change.

    Without CAP_SYS_ADMIN the kernel takes one such change per tenth of a second, machine-wide, and
    answers EAGAIN in between: two children started together (a non-root ``make test``) would leave
    the second's session at 0, so EAGAIN is tried again until ``AUTOGROUP_RETRY_S`` has passed."""
    path = Path(f"/proc/{pid}/autogroup")
    deadline = time.monotonic() + AUTOGROUP_RETRY_S
    while True:
        try:
            path.write_text(str(niceness), encoding="ascii")
            return True
        except OSError as exc:
            if exc.errno != errno.EAGAIN or time.monotonic() >= deadline:
                return False
        time.sleep(0.02)


class ManagedProcess:
    """One child process with its output in a log file; ``stop()`` is safe to call twice.

    ``niceness`` > 0 lowers its priority (and its children's) by that much, as ``nice -n`` does, and
    sets its session's to it, so that it yields the CPU to everything else the host runs."""

    def __init__(self, name: str, argv: Sequence[str], log_dir: Path, *,
                 env: dict[str, str] | None = None, cwd: Path | None = None, niceness: int = 0) -> None:
        self.name = name
        self.argv = list(argv)
        self.niceness = niceness
        self.log_path = Path(log_dir) / f"{name}.log"
        self.env = env
        self.cwd = cwd
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._log_start = 0  # where this run's output begins in an appended log

    def start(self) -> ManagedProcess:
        """Start the process in its own process group (so its children stop with it)."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("ab")
        self._log_start = self._log.tell()
        full_env = {**os.environ, **(self.env or {})}
        # ``nice`` execs the program, so the started process is the program itself.
        lead = ["nice", "-n", str(self.niceness)] if self.niceness else []
        self.proc = subprocess.Popen(
            [*lead, *self.argv], stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=full_env, cwd=self.cwd, start_new_session=True,
        )
        reaper.watch(self.proc.pid)  # stopped even if this process is killed outright
        # Popen returns once the child has exec'd, so its new session exists; the children it
        # starts later (an engine's core and workers) join that session and its niceness.
        if self.niceness and not lower_session_priority(self.proc.pid, self.niceness):
            # Not an error (the process runs, niced): it just competes with other sessions.
            logger.debug("{}: its session keeps its CPU share (the kernel has no autogroups or "
                         "refused to lower their niceness)", self.name)
        return self

    @property
    def running(self) -> bool:
        """True while the child has not exited."""
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, lines: int = 30) -> str:
        """The last lines of the child's output (this run's), for error messages."""
        try:
            with self.log_path.open("rb") as log:
                log.seek(self._log_start)
                text = log.read().decode(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def wait_ready(self, predicate: Callable[[], object], timeout_s: float = 30.0) -> None:
        """Poll ``predicate`` until true; fail early, with the log tail, if the child dies."""
        exited = object()  # a truthy value that ends the wait (an exception would be retried)

        def check() -> object:
            return predicate() if self.running else exited
        try:
            value = wait_until(check, timeout_s, what=f"{self.name} ready")
        except TimeoutError as exc:
            raise ProcessError(f"{exc}\n{self.name} log:\n{self.log_tail()}") from None
        if value is exited:
            raise ProcessError(f"{self.name} exited with {self.proc and self.proc.returncode}:\n"
                               f"{self.log_tail()}")

    def signal(self, sig: int) -> None:
        """Send ``sig`` to the child's whole process group."""
        if self.running and self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)

    def stop(self, timeout_s: float = reaper.GRACE_S) -> int | None:
        """SIGTERM, then SIGKILL after ``timeout_s``; returns the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.signal(signal.SIGKILL)
                self.proc.wait(timeout_s)
        reaper.forget(self.proc.pid)
        if self._log is not None:
            self._log.close()
            self._log = None
        return self.proc.returncode

    def __enter__(self) -> ManagedProcess:
        return self.start()

    @staticmethod
    def stop_all(procs: Sequence[ManagedProcess], timeout_s: float = reaper.GRACE_S) -> None:
        """Stop ``procs`` together: SIGTERM to each first (in the order given), then wait for each.
        Children that take their time to exit (a server draining its connections) then cost the
        slowest one's time, not the sum."""
        for proc in procs:
            proc.signal(signal.SIGTERM)
        for proc in procs:
            proc.stop(timeout_s)

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def oximeter_argv(*args: str) -> list[str]:
    """argv that runs the ``oximeter`` CLI with this interpreter (works without the console script)."""
    return [sys.executable, "-m", "oximeter", *args]
