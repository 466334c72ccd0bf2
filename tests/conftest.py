"""Shared fixtures: child processes, always stopped; the session's one live stack."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest
from pg_server import PostgresServer, StoreSpace
from shared_stack import BACKFILL, STARTED, setup_summary, shared_options
from xdist.remote import Producer
from xdist.scheduler import LoadScopeScheduling

from reporter.sink import ChatSink
from stack.demo_stack import prebuild_backfill
from stack.local import Stack
from stack.procs import ManagedProcess

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
    ManagedProcess.stop_all(list(reversed(started)))


# The order the shared stack's users run in on its worker (everything else keeps collection order):
# - tests that inject no fault first: the fault-free soak's clock runs from Prometheus's start
#   anyway, so they take none of the suite's time;
# - then the soaks, which need the stack fault-free since it started;
# - then the end-to-end faults: the thermal throttle on n1 and the stall on n2 are injected together
#   (tests/e2e/conftest.py). VictoriaMetrics' analyzer is judged first and stopped (it costs a
#   fifth of a core while it runs). The telemetry loss on n2 runs once the stall's incident is diagnosed,
#   while the thermal incident is still resolving; it asserts Prometheus's alert only, so the
#   analyzer folding it into n2's incident changes nothing it judges. No live fault runs before
#   the end-to-end ones: an incident still open when they start would absorb them.
LIVE_ORDER = (
    "tests/live/test_live_queries.py",
    "tests/live/test_live_quiet.py",
    "tests/e2e/test_e2e_quiet.py",
    "tests/e2e/test_e2e_victoria.py",
    "tests/e2e/test_e2e_engine_hung.py",
    "tests/live/test_live_telemetry.py",
    "tests/e2e/test_e2e_thermal.py",
)


REAL_VLLM = "tests/real_vllm/"  # the real vLLM engine's tests (one engine for all, minutes)


# Units that take a worker 15-50 s each (most of it CPU), handed out right after the shared stack's
# so that none of them starts when the other workers are nearly done and the suite waits for its
# tail. On a fresh clone xdist knows no durations; docs/benchmarks.md ("Test suite") lists them.
# The real vLLM engine's tests come first of these: its start takes minutes, mostly waiting.
LONG_FIRST = (
    REAL_VLLM,
    "tests/reporter/test_reporter_digest_e2e.py",
    "tests/simulator/test_live_history_agreement.py",
    "tests/test_ports.py",
    "tests/drills/test_drill.py",
    "tests/e2e/test_e2e_stock.py",
    "tests/simulator/test_sim_history.py",
    "tests/drills/test_drill_live.py",
    "tests/incidents/test_daemon_prometheus_down.py",
    "tests/test_imports.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The shared stack's users first, in ``LIVE_ORDER``, then ``LONG_FIRST``, then the rest in
    collection order (a stable sort); ``GroupScheduling`` hands units out in this order."""
    def rank(item: pytest.Item) -> tuple[int, int]:
        for tier, paths in enumerate((LIVE_ORDER, LONG_FIRST)):
            found = next((i for i, path in enumerate(paths) if item.nodeid.startswith(path)), None)
            if found is not None:
                return tier, found
        return 2, 0
    items.sort(key=rank)


# The store test suites: each runs on SQLite and on PostgreSQL (the ``stores`` fixture).
STORE_SUITES = ("tests/test_store.py", "tests/incidents/test_incidents_store.py",
                "tests/reporter/test_reporter_outbox.py", "tests/reporter/test_reporter_relay.py",
                "tests/incidents/test_incidents_maintenance.py", "tests/incidents/test_incidents_oncall.py",
                "tests/incidents/test_daemon_ha.py")


# Tests that must share one pytest-xdist worker (``make test`` runs several): every user of the
# session's live stack (a session fixture is per worker, and the stack is costly), and the drill
# replays (they fill one history cache; apart they would generate the same windows twice).
# The store suites on both backends share one worker too: one PostgreSQL server for all of them, and
# so do the real vLLM engine's tests: one engine for all of them.
XDIST_GROUPS = {"live_stack": ("tests/live/", "tests/e2e/"), "drill_cache": ("tests/drills/test_drill.py",),
                "postgres": (*STORE_SUITES, "tests/incidents/test_daemon_ha_processes.py"),
                "real_vllm": (REAL_VLLM,)}
# Modules under those paths that do not use the shared stack: on its worker they would run in
# series with it; elsewhere their module-scoped fixtures still keep each one unit. The stock e2e
# starts its own stack; the configuration and chat-sink tests start none.
XDIST_OWN_STACK = (
    "tests/e2e/test_e2e_stock.py", "tests/live/test_stack_config.py", "tests/e2e/test_chat_sink.py",
)


ROOT = Path(__file__).resolve().parent.parent


@functools.cache
def _has_module_fixture(path: str) -> bool:
    """Whether a test module sets up a module-scoped fixture (a Prometheus, a history): split
    across workers, each would pay for it again."""
    file = ROOT / path
    return file.suffix == ".py" and file.is_file() and 'scope="module"' in file.read_text(encoding="utf-8")


class GroupScheduling(LoadScopeScheduling):
    """Each test is its own unit of work, except the groups above and the modules with a
    module-scoped fixture, each one unit; units go out in collection order (see
    ``pytest_collection_modifyitems``: the live stack starts at once, the long units next), not
    xdist's largest-first. xdist's own ``--dist loadgroup`` reads groups from a node-id suffix that
    pytest 9.2 no longer keeps (pytest-dev/pytest-xdist#1386)."""

    def __init__(self, config: pytest.Config, log: Producer | None = None) -> None:
        super().__init__(config, log)
        config.option.loadscopereorder = False

    def _split_scope(self, nodeid: str) -> str:
        group = None if nodeid.startswith(XDIST_OWN_STACK) else \
            next((g for g, paths in XDIST_GROUPS.items() if nodeid.startswith(paths)), None)
        if group is not None:
            return group
        module = nodeid.split("::", 1)[0]
        return module if _has_module_fixture(module) else nodeid


def pytest_xdist_make_scheduler(config: pytest.Config, log: Producer) -> GroupScheduling:
    """``make test``'s scheduler (see ``GroupScheduling``)."""
    return GroupScheduling(config, log)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The live stack's set-up steps, when one was started; each real vLLM engine test by name, with
    its outcome and time (``-q`` names only the failures, and these are the suite's slowest)."""
    for line in setup_summary():
        terminalreporter.write_line(line)
    reports = [r for stat in terminalreporter.stats.values() for r in stat
               if isinstance(r, pytest.TestReport) and r.nodeid.startswith(REAL_VLLM)]
    for nodeid in dict.fromkeys(r.nodeid for r in reports):
        mine = [r for r in reports if r.nodeid == nodeid]
        outcome: str = next((r.outcome for r in mine if r.failed), None) or \
            next((r.outcome for r in mine if r.when == "call"), None) or "not run"
        terminalreporter.write_line(f"real vLLM: {outcome} {nodeid} "
                                    f"({sum(r.duration for r in mine):.1f} s with set-up)")


@pytest.fixture(scope="session")
def live_backfill_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the session's one backfill is built (and reused by every stack of the session)."""
    return tmp_path_factory.mktemp("backfill")


@pytest.fixture(scope="session")
def chat_sink() -> Iterator[ChatSink]:
    """The WeCom sink the shared stack's analyzer tells (every accepted message is kept)."""
    with ChatSink() as sink:
        yield sink


@pytest.fixture(scope="session")
def live_stack(tmp_path_factory: pytest.TempPathFactory, live_backfill_dir: Path,
               chat_sink: ChatSink) -> Iterator[Stack]:
    """The session's one stack (tests/live and tests/e2e), started once and always stopped."""
    workspace = tmp_path_factory.mktemp("stack")
    prebuild_backfill(BACKFILL, live_backfill_dir)  # ends before the analyzer's window: no false gap
    stack = Stack(workspace, shared_options(workspace, live_backfill_dir, chat_sink.url))
    with stack:
        STARTED.append(stack)
        yield stack


def _stderr_now(message: str) -> None:
    import sys

    sys.stderr.write(message)


@pytest.fixture(autouse=True)
def loguru_reset() -> Iterator[None]:
    """After each test, log to whatever ``sys.stderr`` is when a record comes. A command run in the
    test's process (``main([...])``) points loguru at the stderr of that moment, a capture that
    pytest closes after the test: later records then fail to write ("I/O operation on closed
    file"), and a queued handler's thread outlives the test."""
    yield
    from loguru import logger

    logger.remove()  # a queued handler writes out what it holds first
    logger.add(_stderr_now)


@pytest.fixture
def logs_to_stderr() -> Iterator[None]:
    """Log to whatever ``sys.stderr`` is at the time of each message, so ``capsys`` sees in-process logs."""
    from loguru import logger

    logger.remove()
    logger.add(_stderr_now, level="INFO", format="{message}")
    yield


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """The session's PostgreSQL server (tests/pg_server.py), started on first use, always stopped."""
    with PostgresServer() as server:
        yield server


@pytest.fixture(params=["sqlite", "postgresql"])
def stores(request: pytest.FixtureRequest, tmp_path: Path) -> StoreSpace:
    """The test's stores, once on an SQLite file and once on the session's PostgreSQL server."""
    server = request.getfixturevalue("postgres") if request.param == "postgresql" else None
    return StoreSpace(request.param, tmp_path, server)
