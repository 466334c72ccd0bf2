"""A PostgreSQL server of the test session's own, from Debian's package, on a Unix socket only.

``initdb`` into a fresh folder, then ``postgres -k <folder> -c listen_addresses=''``: no TCP port
at all, so nothing to pick or race for; the socket lives in a folder this process owns. PostgreSQL
refuses to run as root, so under root (CI) both run as the package's ``postgres`` user
(``setpriv`` execs, so the process we signal is the server itself). Always stopped (fast shutdown)
and its folder removed.
"""

from __future__ import annotations

import glob
import itertools
import os
import pwd
import re
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from urllib.parse import quote

import psycopg

# Debian installs the server outside PATH, one folder per major version.
_BINDIRS = "/usr/lib/postgresql/*/bin"
START_DEADLINE_S = 60.0
ROLE = "oximeter"


def _binary(name: str) -> str:
    found = sorted(glob.glob(f"{_BINDIRS}/{name}"), key=lambda p: int(re.findall(r"/(\d+)/bin/", p)[0]))
    path = found[-1] if found else shutil.which(name)
    if path is None:
        raise RuntimeError(f"{name} not found: install Debian's postgresql package (make setup does)")
    return path


class PostgresServer:
    """The running server; ``url(schema)`` names a database URL whose tables live in ``schema``."""

    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="oximeter-pg-"))
        self.proc: subprocess.Popen[bytes] | None = None
        self._schemas = itertools.count(1)

    def _as_owner(self) -> list[str]:
        if os.geteuid() != 0:
            return []
        owner = pwd.getpwnam("postgres")
        os.chown(self.folder, owner.pw_uid, owner.pw_gid)
        return ["setpriv", f"--reuid={owner.pw_uid}", f"--regid={owner.pw_gid}", "--init-groups", "--"]

    def __enter__(self) -> PostgresServer:
        prefix = self._as_owner()
        data = self.folder / "data"
        subprocess.run([*prefix, _binary("initdb"), "-D", str(data), "-U", ROLE, "--auth=trust", "-E", "UTF8",
                        "--locale=C", "--no-sync"],
                       check=True, capture_output=True, timeout=120, cwd=self.folder)
        log = open(self.folder / "server.log", "wb")
        # fsync off: a test server's data is thrown away, durability costs only time here.
        self.proc = subprocess.Popen(
            [*prefix, _binary("postgres"), "-D", str(data), "-k", str(self.folder), "-c", "listen_addresses=",
             "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off"],
            stdout=log, stderr=subprocess.STDOUT, cwd=self.folder)
        log.close()
        deadline = time.monotonic() + START_DEADLINE_S
        while True:
            try:
                psycopg.connect(self.url(), connect_timeout=5).close()
                return self
            except psycopg.OperationalError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.__exit__(None, None, None)
                    raise RuntimeError(f"PostgreSQL did not start: {self.log_tail()}") from None
                time.sleep(0.05)

    def log_tail(self) -> str:
        """The end of the server's log."""
        path = self.folder / "server.log"
        return path.read_text(errors="replace")[-2000:] if path.exists() else ""

    def url(self, schema: str | None = None) -> str:
        """The database URL (over the socket); with ``schema``, tables are created and read there."""
        url = f"postgresql://{ROLE}@/postgres?host={quote(str(self.folder), safe='')}"
        return url if schema is None else url + "&options=" + quote(f"-csearch_path={schema}", safe="")

    def new_schema(self, hint: str) -> str:
        """A fresh, empty schema (one per test store: no test sees another's rows)."""
        name = f"s{next(self._schemas)}_{re.sub(r'[^a-z0-9]+', '_', hint.lower())}"[:60]
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{name}"')
        return name

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # fast shutdown: rolls back sessions, stops at once
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        shutil.rmtree(self.folder, ignore_errors=True)


class StoreSpace:
    """Where one test keeps its stores on one backend: ``stores / "name.db"`` is a ``store_path``,
    the same store for the same name within the test (so a test can close and reopen it)."""

    def __init__(self, backend: str, tmp_path: Path, server: PostgresServer | None) -> None:
        self.backend, self._tmp, self._server = backend, tmp_path, server
        self._schemas: dict[str, str] = {}

    def __truediv__(self, name: str) -> str:
        if self._server is None:
            return str(self._tmp / name)
        if name not in self._schemas:
            self._schemas[name] = self._server.new_schema(name)
        return self._server.url(self._schemas[name])
