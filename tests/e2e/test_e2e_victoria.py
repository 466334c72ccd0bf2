"""Issue 8: the same analyzer configuration against VictoriaMetrics single-node finds the same
thermal incident: the PromQL source is not tied to Prometheus.

VictoriaMetrics scrapes the shared stack's targets with the Prometheus job definitions
(``prometheus.yml`` in the stack's workspace: same jobs, same stable ``instance`` labels) and has
no rule engine, so the analyzer reads every signal through its raw-PromQL fallback. It has no
history either: baselines are absent and the static thresholds judge.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import requests
import yaml
from e2e_helpers import THERMAL_ALERT, analyzer_url, incidents, new_incidents
from shared_stack import ANALYZER_STEP_S, SCALE

from oximeter.demo_stack import CHAT_URL_ENV, analyzer_config
from oximeter.ports import start_reserved, wait_port
from oximeter.procs import ManagedProcess, http_ok, oximeter_argv, wait_until
from oximeter.stack import Stack
from oximeter.stack_config import ANALYZER_JOB
from reporter.sink import ChatSink

VICTORIA = shutil.which("victoria-metrics") or "/usr/bin/victoria-metrics"
FAULT_S = 40.0

pytestmark = pytest.mark.e2e


def _scrape_config(stack: Stack, path: Path) -> Path:
    prometheus = yaml.safe_load((stack.workspace / "prometheus.yml").read_text(encoding="utf-8"))
    jobs = [job for job in prometheus["scrape_configs"] if job["job_name"] != ANALYZER_JOB]
    path.write_text(yaml.safe_dump({"global": {"scrape_interval": "1s"}, "scrape_configs": jobs}),
                    encoding="utf-8")
    return path


def test_victoria_metrics_finds_the_thermal_incident(live_stack: Stack, tmp_path: Path,
                                                     start_process: Callable[..., ManagedProcess]) -> None:
    # The earlier e2e faults' incidents are over first: a fresh analyzer has no baseline to tell
    # their tails from a new fault.
    main_api = analyzer_url(live_stack)
    wait_until(lambda: all(i["state"] == "resolved" for i in incidents(main_api)), 180, interval_s=1.0,
               what="the shared stack's incidents resolved")
    scrape = _scrape_config(live_stack, tmp_path / "scrape.yml")
    _, vm_port = start_reserved(lambda port: start_process("victoria-metrics", [
        VICTORIA, f"-httpListenAddr=127.0.0.1:{port}", f"-storageDataPath={tmp_path / 'vm'}",
        f"-promscrape.config={scrape}", "-search.latencyOffset=1s", "-retentionPeriod=1d"]),
        lambda port: http_ok(f"http://127.0.0.1:{port}/health"))
    vm_url = f"http://127.0.0.1:{vm_port}"
    config = analyzer_config(tmp_path, vm_url, scale=SCALE, step_s=ANALYZER_STEP_S, interval_s=1.0,
                             use_recording_rules=False)
    (tmp_path / "oximeter.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    with ChatSink() as sink:
        analyzer = start_process("analyzer-vm", oximeter_argv(
            "--config", str(tmp_path / "oximeter.yaml"), "analyze", "--port", "0",
            "--port-file", str(tmp_path / "api.port")), env={CHAT_URL_ENV: sink.url})
        api = f"http://127.0.0.1:{wait_port(analyzer, tmp_path / 'api.port')}"
        analyzer.wait_ready(lambda: http_ok(f"{api}/metrics"), 60)
        # Scraped series first: the analyzer's windows need some live samples before the fault.
        wait_until(lambda: "oximeter_gpu_temperature_celsius" in vm_metrics(vm_url), 60,
                   what="VictoriaMetrics has scraped the exporters")
        before = {i["id"] for i in incidents(api)}
        t0 = time.monotonic()
        fault_id = live_stack.fault("thermal_throttle", "n1", gpu=1, strength=0.45, duration_s=FAULT_S)
        try:
            found = wait_until(lambda: new_incidents(api, before, layer="infrastructure", node="n1", gpu="1"),
                               120, interval_s=1.0, what="the thermal incident read from VictoriaMetrics")
        finally:
            live_stack.delete_fault(fault_id)
        (got,) = found
        assert got["rule"] == "thermal_throttle", got
        assert [(i["layer"], i["root_cause"]["labels"].get("node")) for i in incidents(api)] == \
            [("infrastructure", "n1")]
        print(f"victoria-metrics: thermal incident after {time.monotonic() - t0:.0f} s ({got['rule']})")
        assert sink.problems == []
    # The shared stack is left quiet for the tests after this one (tests/live expects no alert firing).
    wait_until(lambda: not any(a["labels"]["alertname"] == THERMAL_ALERT for a in live_stack.alerts()),
               120, interval_s=1.0, what=f"{THERMAL_ALERT} resolved")


def vm_metrics(vm_url: str) -> str:
    """Metric names VictoriaMetrics holds (its label-values API, as Prometheus has it)."""
    reply = requests.get(f"{vm_url}/api/v1/label/__name__/values", timeout=10)
    return reply.text if reply.ok else ""
