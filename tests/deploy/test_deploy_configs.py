"""deploy/prometheus.yml and deploy/alertmanager.yml: valid, consistent with the rules, and a real
Alertmanager routes to the relay with the bearer token from its file and inhibits upper layers."""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest
import requests
import yaml

from alert_rules import ADAPTERS_DIR, alerting_rules, rule_files
from stack.ports import start_reserved
from stack.procs import ManagedProcess, http_ok, wait_until

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
AMTOOL = shutil.which("amtool") or "/usr/bin/amtool"
ALERTMANAGER = shutil.which("prometheus-alertmanager") or "/usr/bin/prometheus-alertmanager"
PROMETHEUS = yaml.safe_load((DEPLOY / "prometheus.yml").read_text())
JOBS = {"oximeter-gateway", "vllm", "oximeter-exporter", "oximeter-analyzer"}


def test_promtool_check_config_loads_every_rule_file() -> None:
    result = subprocess.run([PROMTOOL, "check", "config", str(DEPLOY / "prometheus.yml")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(rule_files())} rule files found" in result.stdout


def test_scrape_jobs_are_the_ones_the_platform_alerts_watch() -> None:
    assert {job["job_name"] for job in PROMETHEUS["scrape_configs"]} == JOBS
    platform = {r["alert"]: r["expr"] for r in alerting_rules()}
    for job in JOBS:
        assert f'absent(up{{job="{job}"}})' in platform["ScrapeJobMissing"]
        assert job in platform["TargetDown"]


def test_every_job_gets_a_stable_instance_name() -> None:
    for job in PROMETHEUS["scrape_configs"]:
        assert any(r.get("target_label") == "instance" for r in job["relabel_configs"]), job["job_name"]
    vllm = next(j for j in PROMETHEUS["scrape_configs"] if j["job_name"] == "vllm")
    # The simulator's dependency series carry their own node; the target's must not rename it.
    assert vllm["honor_labels"] is True
    assert {r.get("replacement") for r in vllm["relabel_configs"] if r.get("target_label") == "node"} == {
        "gpu-node-1", "n1", "n2"}


def test_amtool_check_config() -> None:
    result = subprocess.run([AMTOOL, "check-config", str(DEPLOY / "alertmanager.yml")], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(("labels", "receiver"), [
    (["alertname=Watchdog", "severity=info", "layer=platform"], "analyzer-relay"),
    (["alertname=GpuXidCritical", "severity=critical", "node=n1"], "analyzer-relay"),
])
def test_routes(labels: list[str], receiver: str) -> None:
    config = str(DEPLOY / "alertmanager.yml")
    result = subprocess.run([AMTOOL, "config", "routes", "test", "--config.file", config, *labels],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == receiver


class _Relay(BaseHTTPRequestHandler):
    received: ClassVar[list[tuple[str, dict[str, Any]]]]  # set per server by the fixture

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.received.append((self.headers.get("Authorization", ""), body))
        self.send_response(200)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def relay() -> Iterator[tuple[str, list[tuple[str, dict[str, Any]]]]]:
    """A stand-in for the analyzer's relay endpoint, recording what Alertmanager posts."""
    received: list[tuple[str, dict[str, Any]]] = []
    handler = type("Relay", (_Relay,), {"received": received})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/api/alertmanager", received
    server.shutdown()
    server.server_close()
    thread.join(10)


@pytest.fixture
def alertmanager(tmp_path: Path, relay: tuple[str, list[Any]],
                 start_process: Callable[..., ManagedProcess]) -> str:
    """The real Alertmanager with deploy/alertmanager.yml, pointed at the local relay and token file."""
    config = yaml.safe_load((DEPLOY / "alertmanager.yml").read_text())
    webhook = config["receivers"][0]["webhook_configs"][0]
    webhook["url"] = relay[0]
    token = tmp_path / "api_token"
    token.write_text("s3cret-relay-token\n")
    webhook["http_config"]["authorization"]["credentials_file"] = str(token)
    path = tmp_path / "alertmanager.yml"
    path.write_text(yaml.safe_dump(config))
    _, port = start_reserved(lambda port: start_process("alertmanager", [
        ALERTMANAGER, f"--config.file={path}", f"--storage.path={tmp_path / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address=",
    ]), lambda port: http_ok(f"http://127.0.0.1:{port}/-/ready"), timeout_s=30)
    return f"http://127.0.0.1:{port}"


def _post(url: str, *alerts: dict[str, str]) -> None:
    reply = requests.post(f"{url}/api/v2/alerts", json=[{"labels": a} for a in alerts], timeout=10)
    assert reply.status_code == 200, reply.text


def test_lower_layer_inhibits_upper_layers_on_the_same_node(alertmanager: str) -> None:
    _post(alertmanager,
          {"alertname": "GpuTemperatureHigh", "severity": "warning", "layer": "infrastructure", "node": "n1"},
          {"alertname": "Gateway504RatioHigh", "severity": "critical", "layer": "ingress", "node": "n1",
           "service": "chat"},
          {"alertname": "Gateway504RatioHigh", "severity": "critical", "layer": "ingress", "node": "n2",
           "service": "chat"},
          {"alertname": "ScrapeJobMissing", "severity": "warning", "layer": "platform", "job": "vllm"},
          {"alertname": "CacheHitRatioLow", "severity": "warning", "layer": "dependency", "cache": "c"})

    def states() -> dict[tuple[str, str], str] | None:
        alerts = requests.get(f"{alertmanager}/api/v2/alerts", timeout=10).json()
        found = {(a["labels"]["alertname"], a["labels"].get("node", "")): a["status"]["state"]
                 for a in alerts}
        return found if len(found) == 5 and "suppressed" in found.values() else None

    found = wait_until(states, timeout_s=30, what="inhibition applied")
    assert found == {
        ("GpuTemperatureHigh", "n1"): "active",
        ("Gateway504RatioHigh", "n1"): "suppressed",  # the GPU on its node is the likelier cause
        ("Gateway504RatioHigh", "n2"): "active",
        ("ScrapeJobMissing", ""): "active",
        ("CacheHitRatioLow", ""): "active",  # a node-less platform alert silences nothing
    }


def test_watchdog_reaches_the_relay_with_the_bearer_token(alertmanager: str,
                                                          relay: tuple[str, list[Any]]) -> None:
    _post(alertmanager, {"alertname": "Watchdog", "severity": "info", "layer": "platform"})
    received = relay[1]
    wait_until(lambda: received, timeout_s=30, what="Watchdog delivered to the relay")
    authorization, body = received[0]
    assert authorization == "Bearer s3cret-relay-token"
    assert [a["labels"]["alertname"] for a in body["alerts"]] == ["Watchdog"]
    assert body["receiver"] == "analyzer-relay"


def test_the_stock_config_loads_the_adapters_and_checks(tmp_path: Path) -> None:
    """deploy/prometheus-stock.yml: the Kubernetes discovery swapped for a static target (this
    promtool is built without it), everything else as written must pass promtool."""
    stock = yaml.safe_load((DEPLOY / "prometheus-stock.yml").read_text())
    jobs = {job["job_name"] for job in stock["scrape_configs"]}
    assert jobs == {"dcgm-exporter", "vllm", "kube-state-metrics", "kubelet"}
    # Every area's rules but the platform's (its scrape-job checks name Oximeter's own producers).
    areas = {f"../alert_rules/{p.name}" for p in rule_files() if p.name != "platform.rules.yml"}
    assert set(stock["rule_files"]) == {"../alert_rules/adapters/*.rules.yml", *areas}
    for job in stock["scrape_configs"]:
        assert job.pop("kubernetes_sd_configs")
        job["static_configs"] = [{"targets": ["127.0.0.1:9400"]}]
        job.pop("tls_config", None)  # the service account's files exist only in a pod
        job.pop("authorization", None)
    stock["rule_files"] = [str((DEPLOY / f).resolve()) for f in stock["rule_files"]]
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(stock))
    result = subprocess.run([PROMTOOL, "check", "config", str(tmp_path / "prometheus.yml")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(areas) + len(rule_files(ADAPTERS_DIR))} rule files found" in result.stdout
