"""A parent killed outright (SIGKILL: no shutdown runs) still has its children stopped."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from stack.procs import wait_until

PARENT = """
import sys
from stack.procs import ManagedProcess
done = ManagedProcess("done", ["sleep", "600"], sys.argv[1]).start()
done.stop()  # stopped in order: forgotten by the watcher
left = ManagedProcess("left", ["sh", "-c", "sleep 600 & wait"], sys.argv[1]).start()
print(left.proc.pid, flush=True)
sys.stdin.read()  # until killed
"""


def _gone(pid: int) -> bool:
    try:
        os.killpg(pid, 0)
    except ProcessLookupError:
        return True
    # Killed but not yet reaped by init reads as present; its state says it is over.
    stat = Path(f"/proc/{pid}/stat")
    return not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] == "Z"


def test_children_of_a_killed_parent_are_stopped(tmp_path: Path) -> None:
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(tmp_path)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        assert not _gone(child)
        parent.send_signal(signal.SIGKILL)
        parent.wait(30)
        # Its group (the shell and the sleep it started) is stopped once the parent is gone.
        wait_until(lambda: _gone(child), 30, interval_s=0.1, what="the orphaned child stopped")
    finally:
        parent.kill()
        parent.wait(30)
