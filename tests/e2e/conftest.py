"""The end-to-end faults: a thermal throttle on n1 and an engine stall on n2, injected together,
watched by the shared stack's analyzer and by a second analyzer reading VictoriaMetrics.

Two faults at once on different nodes are what a fleet sees on a bad night, and the suite's time
budget cannot afford them one after the other (each waits out real, scaled persistence). Each test
asserts its own node's incident, and that the other fault did not merge into it. VictoriaMetrics
scrapes the same targets from before the faults start, so its analyzer judges the same faults at
the same time instead of waiting for them to end and injecting its own.
"""

from __future__ import annotations

import contextlib
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
import yaml
from e2e_helpers import THERMAL_S, Faults, Victoria, VictoriaStore, analyzer_url, incidents
from shared_stack import ANALYZER_STEP_S, SCALE, open_deadline_s

from alert_rules.scale import format_duration
from analyzer.signals.catalogue import CATALOGUE
from reporter.sink import ChatSink
from stack.config import ANALYZER_JOB
from stack.demo_stack import CHAT_URL_ENV, analyzer_config
from stack.local import Stack, StackError
from stack.ports import start_reserved, wait_port
from stack.procs import ManagedProcess, http_ok, oximeter_argv, wait_until

VICTORIA = shutil.which("victoria-metrics") or "/usr/bin/victoria-metrics"


def _scrape_config(stack: Stack, path: Path) -> Path:
    """The stack's Prometheus jobs (same targets, same stable ``instance`` labels), the analyzer's
    own job left out."""
    prometheus = yaml.safe_load((stack.workspace / "prometheus.yml").read_text(encoding="utf-8"))
    jobs = [job for job in prometheus["scrape_configs"] if job["job_name"] != ANALYZER_JOB]
    interval = format_duration(stack.options.scrape_interval_s)
    path.write_text(yaml.safe_dump({"global": {"scrape_interval": interval}, "scrape_configs": jobs}),
                    encoding="utf-8")
    return path


def vm_metrics(vm_url: str) -> str:
    """Metric names VictoriaMetrics holds (its label-values API, as Prometheus has it)."""
    reply = requests.get(f"{vm_url}/api/v1/label/__name__/values", timeout=10)
    return reply.text if reply.ok else ""


@pytest.fixture(scope="session")
def victoria_store(live_stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[VictoriaStore]:
    """VictoriaMetrics scraping the shared stack's targets from the fault-free soak on, so that its
    analyzer's windows hold live samples from before the faults."""
    work = tmp_path_factory.mktemp("victoria")
    started: list[ManagedProcess] = []
    scrape = _scrape_config(live_stack, work / "scrape.yml")
    try:
        _, vm_port = start_reserved(lambda port: _launch(started, work, "victoria-metrics", [
            VICTORIA, f"-httpListenAddr=127.0.0.1:{port}", f"-storageDataPath={work / 'vm'}",
            f"-promscrape.config={scrape}", "-search.latencyOffset=1s", "-retentionPeriod=1d"]),
            lambda port: http_ok(f"http://127.0.0.1:{port}/health"))
        vm_url = f"http://127.0.0.1:{vm_port}"
        wait_until(lambda: "oximeter_gpu_temperature_celsius" in vm_metrics(vm_url), 60,
                   what="VictoriaMetrics has scraped the exporters")
        yield VictoriaStore(vm_url, work, started)
    finally:
        ManagedProcess.stop_all(list(reversed(started)))


def _launch(started: list[ManagedProcess], work: Path, name: str, argv: list[str],
            env: dict[str, str] | None = None) -> ManagedProcess:
    proc = ManagedProcess(name, argv, work / "logs", env=env).start()
    started.append(proc)
    return proc


@pytest.fixture(scope="session")
def victoria(victoria_store: VictoriaStore) -> Iterator[Victoria]:
    """An analyzer reading VictoriaMetrics, telling its own chat sink. It starts with the faults, not
    with the soak (each of its cycles reads every signal as raw PromQL: a fifth of a core)."""
    store, work = victoria_store, victoria_store.work
    with ChatSink() as sink:
        config = analyzer_config(work, store.url, scale=SCALE, step_s=ANALYZER_STEP_S,
                                 interval_s=ANALYZER_STEP_S, use_recording_rules=False)
        (work / "oximeter.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
        analyzer = _launch(store.started, work, "analyzer-vm", oximeter_argv(
            "--config", str(work / "oximeter.yaml"), "analyze", "--port", "0",
            "--port-file", str(work / "api.port")), env={CHAT_URL_ENV: sink.url})
        api = f"http://127.0.0.1:{wait_port(analyzer, work / 'api.port')}"
        analyzer.wait_ready(lambda: http_ok(f"{api}/metrics"), 60)
        yield Victoria(api, store.url, sink, lambda: ManagedProcess.stop_all(list(reversed(store.started))))


def judged(stack: Stack, signal: str) -> bool:
    """Whether every node's ``signal`` can be judged: its minimum-traffic guard (the requests its
    window must hold, as the analyzer requires) is met on every node."""
    guard = CATALOGUE[signal].min_traffic
    assert guard is not None
    met = stack.query(f"count(({guard.promql}) >= {guard.minimum:g})")
    return bool(met) and float(met[0]["value"][1]) >= len(stack.nodes)


@pytest.fixture(scope="session")
def faults(live_stack: Stack, victoria: Victoria) -> Iterator[Faults]:
    # A fresh stack's windows hold only the minutes since it started (the backfill ends before a
    # gap): the queue's p99 is not judged until they hold enough requests, so the stall would be
    # seen late for a reason that has nothing to do with it. Traffic decides when that is.
    wait_until(lambda: judged(live_stack, "queue_wait_p99"), open_deadline_s("queue_wait_p99"),
               interval_s=1.0, what="enough requests in every node's queue-wait window")
    api = analyzer_url(live_stack)
    # An incident still open would absorb the faults, and each test would wait out its deadline for
    # a new one (tests/conftest.py runs no other fault before these).
    known = incidents(api)
    still_open = [(i["id"], i["rule"]) for i in known if i["state"] != "resolved"]
    assert still_open == [], f"incidents open before the end-to-end faults: {still_open}"
    before = {i["id"] for i in known}
    victoria_before = {i["id"] for i in incidents(victoria.api)}
    t0 = time.monotonic()
    live_stack.fault("thermal_throttle", "n1", gpu=1, strength=0.45, duration_s=THERMAL_S)  # ends by itself
    stall = live_stack.fault("engine_stall", "n2")  # the engine-hung test ends it once diagnosed
    yield Faults(api, before, t0, stall, victoria_before)
    with contextlib.suppress(StackError):  # already deleted by the engine-hung test
        live_stack.delete_fault(stall)
