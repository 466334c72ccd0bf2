"""One writer per store: an OS lock on ``<store>.lock``, held for the life of the process.

Two analyzers on one store would each open, notify and resolve the same incidents (the tracker's
state is in-process), so the second is refused and told who holds the store. The kernel drops
the lock when its holder exits, crashed or not, so a stale lock file never blocks a restart.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from pathlib import Path
from typing import IO, Protocol

from oximeter.store import StoreError, is_postgres_url


class StoreLock:
    """The held lock; ``release()`` (or process exit) lets the next writer in."""

    def __init__(self, path: Path, handle: IO[str]) -> None:
        self.path, self._handle = path, handle

    def release(self) -> None:
        """Drop the lock (the file stays: removing it could race a writer that just opened it)."""
        if not self._handle.closed:
            fcntl.flock(self._handle, fcntl.LOCK_UN)
            self._handle.close()


def lock_path(store: str | Path) -> Path:
    """The lock file beside ``store``."""
    return Path(f"{store}.lock")


class _Releasable(Protocol):
    def release(self) -> None: ...


def hold_store(store: str | Path, command: str) -> _Releasable:
    """Take the store's writer lock for ``command`` or raise ``StoreError`` naming the holder (on
    PostgreSQL an advisory lock, which the server drops with its holder's connection)."""
    if is_postgres_url(store):
        from oximeter.store_pg import hold_writer

        return hold_writer(str(store), command)
    path = lock_path(store)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(path, "a+", encoding="utf-8")  # noqa: SIM115 - held open for the process's life
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = _describe(handle.read())
        handle.close()
        raise StoreError(f"{store}: the store is in use by {holder}; one analyzer per store "
                         f"(stop that one first, or give this one another store)") from None
    except OSError as exc:
        handle.close()
        raise StoreError(f"{path}: cannot lock the store: {exc.strerror}") from None
    handle.seek(0)
    handle.truncate()
    handle.write(json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "command": command,
                             "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}))
    handle.flush()
    return StoreLock(path, handle)


def _describe(text: str) -> str:
    try:
        info = json.loads(text)
        return f"{info['command']} (pid {info['pid']} on {info['host']}, since {info['since']})"
    except (ValueError, KeyError, TypeError):
        return "another process"
