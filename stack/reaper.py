"""Stop a process's children when it dies, however it dies.

:class:`~stack.procs.ManagedProcess` starts each child in its own session, so that stopping it
stops what it started, and so that a Ctrl-C meant for the parent reaches the children through the
parent's orderly shutdown. A parent killed outright (SIGKILL, an out-of-memory kill, a CI runner's
timeout) runs no shutdown, and its servers (Prometheus, Redis, the simulator) would keep running
and keep their ports. One small watcher process per parent holds the read end of a pipe whose write
end only the parent has: the kernel closes it when the parent ends, for any reason, and the watcher
then stops the process groups still registered with it (SIGTERM, then SIGKILL to whatever is left).

Run as a script (``python reaper.py``) it is the watcher; imported, it registers and forgets groups.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from typing import IO

# How long a stopped child gets to exit on SIGTERM before it is killed, here and in
# ``ManagedProcess.stop``: Kubernetes' default grace for a pod (terminationGracePeriodSeconds). A
# daemon finishing its cycle and flushing its store on a loaded machine has taken more than 10 s.
# (Defined here: the watcher runs as a script of its own.)
GRACE_S = 30.0

_lock = threading.Lock()
_watcher: subprocess.Popen[bytes] | None = None


def _send(line: str, *, start: bool = True) -> None:
    global _watcher
    with _lock:
        try:
            if _watcher is None or _watcher.poll() is not None:
                if not start:
                    return  # nothing registered is watched: nothing to forget
                # Its own session: a signal to the parent's group (a terminal's Ctrl-C) leaves it be.
                _watcher = subprocess.Popen([sys.executable, __file__], stdin=subprocess.PIPE,
                                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                            start_new_session=True)
            pipe: IO[bytes] | None = _watcher.stdin
            assert pipe is not None
            pipe.write(line.encode() + b"\n")
            pipe.flush()
        except OSError:
            # Without a watcher the children are stopped as before, by ManagedProcess.stop; only
            # a parent killed outright would leave them running.
            _watcher = None


def watch(pgid: int) -> None:
    """Stop process group ``pgid`` if this process ends before calling :func:`forget` for it."""
    _send(str(pgid))


def forget(pgid: int) -> None:
    """``pgid`` is stopped (or handed on): nothing to do for it any more."""
    _send(str(-pgid), start=False)


def _alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _stop(groups: set[int]) -> None:
    for pgid in groups:
        if _alive(pgid):
            os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + GRACE_S
    while any(_alive(g) for g in groups) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pgid in groups:
        if _alive(pgid):
            os.killpg(pgid, signal.SIGKILL)


def main() -> None:
    """The watcher: read ``pgid`` / ``-pgid`` lines until the parent's end of the pipe closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    groups: set[int] = set()
    for line in sys.stdin:
        with_sign = int(line)
        if with_sign > 0:
            groups.add(with_sign)
        else:
            groups.discard(-with_sign)
    _stop(groups)


if __name__ == "__main__":
    main()
