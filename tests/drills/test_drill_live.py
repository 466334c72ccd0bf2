"""``oximeter drill --live`` against real processes: the simulator (admin API), a simulated-GPU
exporter, Prometheus scraping it every second and the analyzer daemon reading Prometheus.

The scenario is an uncorrectable ECC error (it fires on its first sample: no baseline needed on
a fresh Prometheus), written to a temporary folder as any user's scenario would be.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import requests

from stack.ports import start_reserved, wait_port, wait_ports
from stack.procs import ManagedProcess, http_ok, oximeter_argv, wait_until

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
TOKEN = "drill-admin-token"
SCENARIO = """\
name: live_ecc_uncorrectable
description: an uncorrectable ECC error on n1 GPU 1
nodes: 1
gpus_per_node: 2
faults:
  - {kind: ecc_uncorrectable, node: n1, gpu: 1, start: -90m, duration: 10m, strength: 1}
truth: {layer: infrastructure, entity: {node: n1, gpu: "1"}, rule: ecc_uncorrectable}
"""



@dataclass(frozen=True)
class LiveStack:
    """The URLs a live drill needs."""

    sim_url: str
    analyzer_url: str
    root: Path


def _cycles(url: str) -> float:
    for line in requests.get(url, timeout=5).text.splitlines():
        if line.startswith("oximeter_analyzer_cycle_seconds_count"):
            return float(line.split()[-1])
    return 0.0


def _scraped(prom_url: str) -> bool:
    result = requests.get(f"{prom_url}/api/v1/query", params={"query": 'up{job="oximeter-exporter"} == 1'},
                          timeout=5).json()["data"]["result"]
    return bool(result)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveStack]:
    """Simulator → exporter → Prometheus → analyzer, started in order and always stopped."""
    root = tmp_path_factory.mktemp("live-drill")
    logs = root / "logs"
    procs: list[ManagedProcess] = []

    def start(name: str, argv: list[str], **kwargs: Any) -> ManagedProcess:
        procs.append(ManagedProcess(name, argv, logs, **kwargs).start())
        return procs[-1]

    try:
        sim = start("simulator", oximeter_argv("sim", "serve", "--port", "0", "--port-file",
                                               str(root / "sim.port"), "--nodes", "1",
                                               "--gpus-per-node", "2"),
                    env={"OXIMETER_ADMIN_TOKEN": TOKEN})
        sim_url = f"http://127.0.0.1:{wait_ports(sim, root / 'sim.port')['n1']}"
        sim.wait_ready(partial(http_ok, f"{sim_url}/fleet"), timeout_s=60)
        exporter = start("exporter", oximeter_argv("exporter", "--backend", "sim", "--sim-url", sim_url,
                                                   "--node", "n1", "--port", "0",
                                                   "--port-file", str(root / "exporter.port")))
        exporter_port = wait_port(exporter, root / "exporter.port")
        exporter.wait_ready(partial(http_ok, f"http://127.0.0.1:{exporter_port}/metrics"), timeout_s=60)
        (root / "prometheus.yml").write_text(
            "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
            "scrape_configs:\n  - job_name: oximeter-exporter\n"
            f"    static_configs: [{{targets: ['127.0.0.1:{exporter_port}']}}]\n")
        _, prom_port = start_reserved(
            lambda port: start("prometheus", [PROMETHEUS, f"--config.file={root / 'prometheus.yml'}",
                                              f"--storage.tsdb.path={root / 'tsdb'}",
                                              f"--web.listen-address=127.0.0.1:{port}"]),
            lambda port: http_ok(f"http://127.0.0.1:{port}/-/ready"))
        prom_url = f"http://127.0.0.1:{prom_port}"
        (root / "oximeter.yaml").write_text(
            f"analyzer: {{prometheus: {{url: '{prom_url}'}}, step_s: 1, interval_s: 1, live_window_s: 600}}\n"
            f"incidents: {{store_path: '{root / 'oximeter.db'}'}}\n")
        analyzer = start("analyzer", oximeter_argv("--config", str(root / "oximeter.yaml"), "analyze",
                                                   "--port", "0", "--port-file", str(root / "api.port")),
                         cwd=root)
        api_port = wait_port(analyzer, root / "api.port")
        analyzer.wait_ready(partial(http_ok, f"http://127.0.0.1:{api_port}/api/incidents"), timeout_s=60)
        # A drill starts against a running stack: Prometheus holds the counters from before the
        # injection (a counter whose first sample is already 1 shows no increase) and the analyzer
        # has read them for a few cycles.
        wait_until(partial(_scraped, prom_url), 60, 0.2, what="Prometheus's first scrape of the exporter")
        metrics = f"http://127.0.0.1:{api_port}/metrics"
        done = _cycles(metrics)
        wait_until(lambda: _cycles(metrics) >= done + 3, 60, 0.5, what="three cycles on scraped data")
        (root / "scenarios").mkdir()
        (root / "scenarios" / "live_ecc_uncorrectable.yaml").write_text(SCENARIO)
        yield LiveStack(sim_url, f"http://127.0.0.1:{api_port}", root)
    finally:
        for proc in reversed(procs):
            proc.stop()


@pytest.mark.timeout(240)
def test_live_drill_injects_scores_and_cleans_up(stack: LiveStack) -> None:
    argv = oximeter_argv("drill", "--all", "--live", "--scenarios", str(stack.root / "scenarios"),
                         "--sim-url", stack.sim_url, "--analyzer-url", stack.analyzer_url,
                         "--time-scale", "0.05", "--timeout-s", "120", "--json")
    env = {**os.environ, "OXIMETER_ADMIN_TOKEN": TOKEN}
    result = subprocess.run(argv, capture_output=True, text=True, timeout=200, env=env, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    doc = json.loads(result.stdout)
    [one] = doc["drills"]
    assert (one["mode"], one["passed"], one["detected"], one["reason"]) == ("live", True, True, "right")
    [got] = one["attributed"]
    assert (got["layer"], got["rule"], got["entity"]["node"], got["entity"]["gpu"]) == \
        ("infrastructure", "ecc_uncorrectable", "n1", "1")
    assert one["messages"] >= 1 and 0 <= one["time_to_detect_s"] < 120
    # The injected fault is gone afterwards: a drill leaves the stack as it found it.
    faults = requests.get(f"{stack.sim_url}/admin/faults", headers={"Authorization": f"Bearer {TOKEN}"},
                          timeout=10).json()["faults"]
    assert [f["id"] for f in faults if f["id"].startswith("drill-")] == []


def test_live_without_the_token_is_a_usage_error(stack: LiveStack) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OXIMETER_ADMIN_TOKEN")}
    result = subprocess.run(oximeter_argv("drill", "thermal_throttle", "--live", "--sim-url", stack.sim_url,
                                          "--analyzer-url", stack.analyzer_url),
                            capture_output=True, text=True, timeout=60, env=env, check=False)
    assert result.returncode == 2
    assert "OXIMETER_ADMIN_TOKEN" in result.stderr and TOKEN not in result.stderr
