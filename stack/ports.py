"""Ports for the servers the demo and the tests start, never chosen before they are bound.

Asking the kernel for a free port, closing it and letting a child bind it later races with every
outgoing connection on the machine: the kernel hands out the same ephemeral range
(``net.ipv4.ip_local_port_range``) as client ports, and under a parallel test run thousands of
requests a minute draw from it. So:

* Our own servers bind port 0 and write the port they got to a ``--port-file``
  (``oximeter.ports.write_port_file``); the parent reads it with ``wait_port`` (``wait_ports``).
  In-process servers bind 0 and read their socket's address.
* Third-party servers (Prometheus, Alertmanager, VictoriaMetrics, Redis) cannot report a port-0
  bind. ``start_reserved`` gives them a port from outside the ephemeral range (so no outgoing
  connection can take it), reserved against concurrent test workers and demos by an ``flock`` on a
  per-port file until the child listens, and restarts the child on another port when it still
  finds the port taken.
* ``refusing_port`` is a port where nothing listens, held bound so nothing else can start there.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import random
import socket
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from oximeter.errors import OximeterError
from oximeter.ports import read_port_file
from stack.procs import ManagedProcess, ProcessError

HOST = "127.0.0.1"
EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
LOCK_DIR = Path(tempfile.gettempdir()) / "oximeter-ports"
# Reserved ports start above the registered services most often installed (databases, 8080, 9090).
LOWEST_RESERVED_PORT = 10000
IN_USE = "address already in use"  # how Go, Redis and Python servers report EADDRINUSE


class PortError(OximeterError):
    """No port could be reserved, or a server reported something else than its port."""


def _read_port_file(proc: ManagedProcess, path: Path, timeout_s: float) -> object:
    proc.wait_ready(path.is_file, timeout_s)  # fails early, with its log, if the child exits
    return read_port_file(path)


def wait_port(proc: ManagedProcess, path: Path, timeout_s: float = 60.0) -> int:
    """The port ``proc`` wrote to ``path`` once it listened."""
    value = _read_port_file(proc, path, timeout_s)
    if not isinstance(value, int):
        raise PortError(f"{proc.name} wrote {value!r} to {path}, expected one port")
    return value


def wait_ports(proc: ManagedProcess, path: Path, timeout_s: float = 60.0) -> dict[str, int]:
    """The ports by name (the simulator's by node) ``proc`` wrote to ``path`` once it listened."""
    value = _read_port_file(proc, path, timeout_s)
    if not isinstance(value, dict) or not all(isinstance(v, int) for v in value.values()):
        raise PortError(f"{proc.name} wrote {value!r} to {path}, expected {{name: port}}")
    return {str(k): int(v) for k, v in value.items()}


def ephemeral_range(path: Path = EPHEMERAL_RANGE_FILE) -> tuple[int, int]:
    """The kernel's ephemeral port range (Linux's default where it cannot be read)."""
    try:
        low, high = (int(v) for v in path.read_text(encoding="ascii").split())
    except (OSError, ValueError):
        return 32768, 60999
    return low, high


def reservable_ports(ephemeral: tuple[int, int] | None = None) -> list[int]:
    """Ports outside the ephemeral range, from ``LOWEST_RESERVED_PORT`` up (1024 up if none are)."""
    low, high = ephemeral or ephemeral_range()
    for floor in (LOWEST_RESERVED_PORT, 1024):
        ports = [p for p in range(floor, 65536) if not low <= p <= high]
        if ports:
            return ports
    raise PortError(f"every port is in the ephemeral range {low}-{high}")


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
    return True


@contextlib.contextmanager
def reserve_port(lock_dir: Path = LOCK_DIR) -> Iterator[int]:
    """A port outside the ephemeral range that no cooperating process holds and that binds now.

    The ``flock`` is held until the ``with`` block ends (by then the child listens on the port);
    it dies with the process, so a killed run leaves nothing reserved.
    """
    lock_dir.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(PermissionError):
        lock_dir.chmod(0o1777)  # shared by every user's runs, as /tmp is (only its owner may chmod)
    ports = reservable_ports()
    start = random.randrange(len(ports))
    for port in ports[start:] + ports[:start]:
        try:  # read-only is enough for flock, and opens another user's lock file too
            fd = os.open(lock_dir / f"{port}.lock", os.O_RDONLY | os.O_CREAT, 0o666)
        except PermissionError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue
        try:
            if _bindable(port):
                yield port
                return
        finally:
            os.close(fd)  # closing the file releases the lock
    raise PortError("no port outside the ephemeral range is free")


def start_reserved(start: Callable[[int], ManagedProcess], ready: Callable[[int], object], *,
                   timeout_s: float = 60.0, attempts: int = 5) -> tuple[ManagedProcess, int]:
    """Start a third-party server with ``start(port)`` on a reserved port, polled with ``ready(port)``.

    A child that exits because the port was taken after all (a process that does not take part in
    the reservations) is started again on another port; one that fails otherwise is stopped.
    """
    for _ in range(attempts):
        with reserve_port() as port:
            proc = start(port)
            try:
                proc.wait_ready(lambda port=port: ready(port), timeout_s)  # type: ignore[misc]
            except ProcessError:
                taken = not proc.running and IN_USE in proc.log_tail().lower()
                proc.stop()
                if not taken:
                    raise
                continue
            return proc, port
    raise PortError(f"{attempts} reserved ports were taken when the server bound them")


@contextlib.contextmanager
def refusing_port() -> Iterator[int]:
    """A loopback port that refuses connections: bound (so nothing else takes it) but not listening."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        yield int(sock.getsockname()[1])

