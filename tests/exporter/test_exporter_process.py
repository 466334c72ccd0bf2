"""The exporter as a real process: against the real simulator, with a real Redis, and its exits."""

from __future__ import annotations

import ctypes.util
import os
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest
import redis
import requests
from exporter_harness import NODE, FleetServer, fleet_server, promtool_check, sim_document, sim_gpu
from prometheus_client.parser import text_string_to_metric_families

from exporter.host import ProcessMemory
from stack.ports import start_reserved, wait_port, wait_ports
from stack.procs import ManagedProcess, http_ok, oximeter_argv, wait_until

StartProcess = Callable[..., ManagedProcess]
SIM_TOKEN = "exporter-test-token"


def samples(url: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """GET /metrics (asserting 200) → {(name, labels): value}."""
    answer = requests.get(url, timeout=10)
    assert answer.status_code == 200
    found = {}
    for family in text_string_to_metric_families(answer.text):
        for s in family.samples:
            found[(s.name, frozenset(s.labels.items()))] = s.value
    return found


def pick(found: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str,
         **labels: str) -> dict[frozenset[tuple[str, str]], float]:
    """Samples named ``name`` whose labels include ``labels``."""
    want = set(labels.items())
    return {lbl: v for (n, lbl), v in found.items() if n == name and want <= lbl}


def start_exporter(start_process: StartProcess, port_file: Path, *args: str) -> str:
    proc = start_process("exporter", oximeter_argv("exporter", "--port", "0", "--port-file", str(port_file),
                                                   *args))
    url = f"http://127.0.0.1:{wait_port(proc, port_file)}/metrics"
    proc.wait_ready(lambda: http_ok(url), timeout_s=30)
    return url


@pytest.fixture
def fleet() -> Iterator[FleetServer]:
    yield from fleet_server(sim_document([sim_gpu(0)]))


def test_reads_the_real_simulator(start_process: StartProcess, tmp_path: Path) -> None:
    sim = start_process("simulator", oximeter_argv("sim", "serve", "--port", "0", "--port-file",
                                                   str(tmp_path / "sim.port"), "--nodes", "1",
                                                   "--gpus-per-node", "2"),
                        env={"OXIMETER_ADMIN_TOKEN": SIM_TOKEN})
    sim_url = f"http://127.0.0.1:{wait_ports(sim, tmp_path / 'sim.port')['n1']}"
    sim.wait_ready(lambda: http_ok(f"{sim_url}/health"), timeout_s=30)
    url = start_exporter(start_process, tmp_path / "exporter.port", "--backend", "sim", "--sim-url", sim_url,
                         "--node", "n1")

    found = samples(url)
    assert sorted(pick(found, "oximeter_gpu_up").values()) == [1.0, 1.0]
    assert {dict(lbl)["gpu"] for lbl in pick(found, "oximeter_gpu_up")} == {"0", "1"}
    assert pick(found, "oximeter_simulation_info") == {frozenset({("node", "n1")}): 1.0}
    assert pick(found, "oximeter_gpu_xid_errors_total", xid="79") != {}
    lint = promtool_check(requests.get(url, timeout=10).text)
    assert lint.returncode == 0, lint.stdout + lint.stderr

    fault = subprocess.run(oximeter_argv("sim", "fault", "telemetry_loss", "--url", sim_url, "--node", "n1"),
                           capture_output=True, text=True, timeout=60,
                           env={**os.environ, "OXIMETER_ADMIN_TOKEN": SIM_TOKEN})
    assert fault.returncode == 0, fault.stderr
    lost = samples(url)
    assert pick(lost, "oximeter_gpu_up") == {}
    assert pick(lost, "oximeter_exporter_collect_errors_total", reason="telemetry_lost") == {
        frozenset({("node", "n1"), ("reason", "telemetry_lost")}): 1.0}


def test_redis_queue_growth_then_redis_down(start_process: StartProcess, tmp_path: Path,
                                            fleet: FleetServer) -> None:
    server, redis_port = start_reserved(
        lambda port: start_process("redis", ["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                                             "--save", "", "--appendonly", "no", "--dir", str(tmp_path)]),
        lambda port: redis.Redis(host="127.0.0.1", port=port, socket_timeout=5).ping(), timeout_s=30)
    client = redis.Redis(host="127.0.0.1", port=redis_port, socket_timeout=5)
    url = start_exporter(start_process, tmp_path / "exporter.port", "--backend", "sim",
                         "--sim-url", fleet.url, "--node", NODE,
                         "--redis-url", f"redis://127.0.0.1:{redis_port}/0",
                         "--queue", "jobs=queue:jobs", "--stream", "events=events")

    def length(found: dict[tuple[str, frozenset[tuple[str, str]]], float], queue: str) -> float | None:
        return found.get(("oximeter_external_queue_length", frozenset({("node", NODE), ("queue", queue)})))

    def redis_errors(found: dict[tuple[str, frozenset[tuple[str, str]]], float]) -> float | None:
        return found.get(("oximeter_exporter_collect_errors_total",
                          frozenset({("node", NODE), ("reason", "redis")})))

    first = samples(url)
    assert length(first, "jobs") == 0 and length(first, "events") == 0
    assert redis_errors(first) == 0
    client.rpush("queue:jobs", "a", "b", "c")
    client.xadd("events", {"k": "v"})
    assert length(samples(url), "jobs") == 3
    client.rpush("queue:jobs", "d", "e")
    grown = samples(url)
    assert length(grown, "jobs") == 5 and length(grown, "events") == 1

    client.close()
    server.stop()
    down = samples(url)  # still answers 200 (asserted in samples)
    assert length(down, "jobs") is None
    assert redis_errors(down) == 1
    assert pick(down, "oximeter_gpu_up") != {}  # the GPUs are still exported
    assert redis_errors(samples(url)) == 2


def test_without_nvml_the_exporter_exits_with_a_reason() -> None:
    if ctypes.util.find_library("nvidia-ml"):
        pytest.skip("this host has NVML; scripts/gpu_check.sh covers it")
    argv = [sys.executable, "-m", "exporter", "--backend", "nvml", "--port", "0"]  # exits before binding
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert "NVML initialisation failed" in result.stderr


def test_config_section_is_read_and_checked(tmp_path: Path, start_process: StartProcess,
                                            fleet: FleetServer) -> None:
    good = tmp_path / "oximeter.yaml"
    good.write_text(f"exporter:\n  backend: sim\n  sim_url: {fleet.url}\n  node: cfg-node\n  port: 0\n")
    proc = start_process("exporter", [sys.executable, "-m", "exporter", "--config", str(good),
                                      "--port-file", str(tmp_path / "exporter.port")])
    url = f"http://127.0.0.1:{wait_port(proc, tmp_path / 'exporter.port')}/metrics"
    proc.wait_ready(lambda: http_ok(url), timeout_s=30)
    assert pick(samples(url), "oximeter_simulation_info") == {frozenset({("node", "cfg-node")}): 1.0}

    bad = tmp_path / "bad.yaml"
    bad.write_text("exporter:\n  backend: tpu\n")
    result = subprocess.run([sys.executable, "-m", "exporter", "--config", str(bad)], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 2
    assert f"{bad}: exporter.backend: must be one of none, nvml, sim, got 'tpu'" in result.stderr


def test_host_process_rss_is_read_with_psutil(start_process: StartProcess, tmp_path: Path) -> None:
    # The probe says when its interpreter has finished starting, so its RSS no longer moves.
    ready = tmp_path / "ready"
    code = f"import pathlib, time; pathlib.Path({str(ready)!r}).touch(); time.sleep(120)"
    child = start_process("probe", [sys.executable, "-c", code, "oximeter-rss-probe"])
    assert child.proc is not None
    pid = child.proc.pid
    wait_until(ready.exists, 30, what="probe up")
    found, errors = ProcessMemory(["oximeter-rss-probe", "no-such-process"]).read()
    assert errors == []
    assert [(p.name, p.rss_bytes) for p in found] == [
        ("oximeter-rss-probe", psutil.Process(pid).memory_info().rss)]


def test_an_unreachable_simulator_is_exported_as_telemetry_down_from_the_first_scrape(
        start_process: StartProcess, tmp_path: Path) -> None:
    with socket.socket() as reserved:  # bound, never listening: connections to it are refused
        reserved.bind(("127.0.0.1", 0))
        sim_url = f"http://127.0.0.1:{reserved.getsockname()[1]}"
        url = start_exporter(start_process, tmp_path / "exporter.port", "--backend", "sim",
                             "--sim-url", sim_url, "--node", "n1")
        first = samples(url)
    assert pick(first, "oximeter_telemetry_up") == {frozenset({("node", "n1")}): 0.0}
    assert pick(first, "oximeter_gpu_up") == {}
    # (The readiness probe scraped too: each scrape tried the simulator once.)
    (tries,) = pick(first, "oximeter_exporter_collect_errors_total", reason="sim_unreachable").values()
    assert tries >= 1


def test_host_memory_total_is_read_with_psutil() -> None:
    assert ProcessMemory([]).memory_total_bytes() == psutil.virtual_memory().total
