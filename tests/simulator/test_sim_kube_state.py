"""The simulator's kube-state-metrics exposition: an engine restart is a container restart and a
not-ready pod, and the Kubernetes adapter rules read it as they read a real cluster."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import requests
import yaml
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from alert_rules import ADAPTERS_DIR
from simulator.clock import VirtualClock
from simulator.engine import EngineParams
from simulator.fleet import Fleet
from simulator.kube_state import KubeStateCollector
from stack.procs import wait_until
from tests.simulator.sim_harness import StartSim

PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"


def _fleet() -> tuple[VirtualClock, Fleet]:
    clock = VirtualClock()
    params = EngineParams(decode_s_per_token=0.1, decode_batch_factor=0.0, prefill_s_per_token=0.0)
    return clock, Fleet(clock, nodes=2, gpus_per_node=1, params=params, model_name="m")


def _scrape(fleet: Fleet, clock: VirtualClock) -> dict[str, float]:
    """One scrape as ``series selector -> value``."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(KubeStateCollector(fleet, clock.now))
    text = generate_latest(registry).decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if not sample.name.endswith("_created"):
                labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
                out[f"{sample.name}{{{labels}}}"] = sample.value
    return out


def test_a_restart_is_a_container_restart_and_a_not_ready_pod() -> None:
    clock, fleet = _fleet()
    before = _scrape(fleet, clock)
    pod = 'namespace="llm",pod="vllm-n1",uid="sim-n1"'
    assert before[f'kube_pod_container_status_restarts_total{{container="vllm",{pod}}}'] == 0
    assert before[f'kube_pod_status_ready{{condition="true",{pod}}}'] == 1
    assert before['kube_node_status_condition{condition="Ready",node="n1",status="true"}'] == 1
    assert any(k.startswith("kube_pod_info{") and 'node="n1"' in k and 'pod="vllm-n1"' in k for k in before)
    fleet.add_fault({"kind": "engine_restart", "node": "n1", "strength": 30})
    fleet.apply_restarts(clock.now())
    during = _scrape(fleet, clock)
    assert during[f'kube_pod_container_status_restarts_total{{container="vllm",{pod}}}'] == 1
    assert during[f'kube_pod_status_ready{{condition="true",{pod}}}'] == 0
    assert during[f'kube_pod_status_ready{{condition="false",{pod}}}'] == 1
    assert during['kube_pod_status_ready{condition="true",namespace="llm",pod="vllm-n2",uid="sim-n2"}'] == 1
    clock.advance(30)
    after = _scrape(fleet, clock)
    assert after[f'kube_pod_status_ready{{condition="true",{pod}}}'] == 1
    assert after[f'kube_pod_container_status_restarts_total{{container="vllm",{pod}}}'] == 1


def test_the_kubernetes_adapter_reads_the_simulator(tmp_path: Path) -> None:
    """Scrapes every 30 s for 3 min, the engine of n1 restarting at 1 min: the recorded restarts
    land on n1's pod, and its readiness drops and comes back."""
    clock, fleet = _fleet()
    scrapes = []
    for step in range(7):
        if step == 2:
            fleet.add_fault({"kind": "engine_restart", "node": "n1", "strength": 30})
            fleet.apply_restarts(clock.now())
        scrapes.append(_scrape(fleet, clock))
        clock.advance(30)
    extra = ',instance="sim:8100",job="kube-state-metrics"}'
    series = [{"series": name[:-1] + extra, "values": " ".join(f"{s[name]:g}" for s in scrapes)}
              for name in scrapes[0]]
    shutil.copy(ADAPTERS_DIR / "kubernetes.rules.yml", tmp_path / "kubernetes.rules.yml")
    n1 = 'node="n1",namespace="llm",pod="vllm-n1"'
    test = {"rule_files": ["kubernetes.rules.yml"], "evaluation_interval": "15s", "tests": [{
        "interval": "30s", "input_series": series, "promql_expr_test": [
            {"expr": "round(node_pod:kube_pod_container_status_restarts:increase5m{pod=\"vllm-n1\"})",
             "eval_time": "3m", "exp_samples": [{"labels": f"{{{n1}}}", "value": 1}]},
            {"expr": "node_pod:kube_pod_ready:max{pod=\"vllm-n1\"}", "eval_time": "1m",
             "exp_samples": [{"labels": f"node_pod:kube_pod_ready:max{{{n1}}}", "value": 0}]},
            {"expr": "node_pod:kube_pod_ready:max{pod=\"vllm-n1\"}", "eval_time": "2m",
             "exp_samples": [{"labels": f"node_pod:kube_pod_ready:max{{{n1}}}", "value": 1}]},
            {"expr": "node:kube_node_ready:max", "eval_time": "2m", "exp_samples": [
                {"labels": 'node:kube_node_ready:max{node="n1"}', "value": 1},
                {"labels": 'node:kube_node_ready:max{node="n2"}', "value": 1}]},
        ]}]}
    (tmp_path / "sim.test.yml").write_text(yaml.safe_dump(test))
    result = subprocess.run([PROMTOOL, "test", "rules", "sim.test.yml"], capture_output=True, text=True,
                            timeout=120, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_live_simulator_serves_it(start_sim: StartSim) -> None:
    """``/kube-state/metrics`` on an engine port: the restart injected through the admin API
    shows once the simulator has applied it (the wait is a deadline, not a tuned sleep)."""
    sim = start_sim("--decode-s-per-token", "0.01")
    restarts = ('kube_pod_container_status_restarts_total', frozenset(
        {"namespace": "llm", "pod": "vllm-n1", "uid": "sim-n1", "container": "vllm"}.items()))

    def samples() -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
        text = requests.get(sim.url(2) + "/kube-state/metrics", timeout=10).text
        return {(s.name, frozenset(s.labels.items())): s.value
                for fam in text_string_to_metric_families(text) for s in fam.samples}

    assert samples()[restarts] == 0
    assert sim.admin("POST", "/admin/faults", json={"kind": "engine_restart", "node": "n1",
                                                    "strength": 30}).status_code in (200, 201)
    wait_until(lambda: samples()[restarts] == 1, timeout_s=30, what="the restart in kube-state metrics")


def test_a_rollout_raises_the_generation_and_is_a_change_event() -> None:
    """A rollout on n1: the deployment's generation rises once, n1's new pod is not ready while its
    engine starts, and no container restarted; the analyzer's change feed reads one rollout."""
    import pandas as pd

    from analyzer.service.kube_changes import FEEDS, rises

    clock, fleet = _fleet()
    generation = 'kube_deployment_metadata_generation{deployment="vllm",namespace="llm"}'
    pod = 'namespace="llm",pod="vllm-n1",uid="sim-n1"'
    restarts = f'kube_pod_container_status_restarts_total{{container="vllm",{pod}}}'
    scrapes = []
    for step in range(6):
        if step == 2:
            fleet.add_fault({"kind": "rollout", "node": "n1", "strength": 60})
            fleet.apply_restarts(clock.now())
            # The engine restarts with the new version: down while it starts, its peer untouched.
            assert (fleet.nodes["n1"].down_until, fleet.nodes["n2"].down_until) == (clock.now() + 60, 0.0)
            during = _scrape(fleet, clock)
            assert during[f'kube_pod_status_ready{{condition="true",{pod}}}'] == 0
            n2 = 'namespace="llm",pod="vllm-n2",uid="sim-n2"'
            assert during[f'kube_pod_status_ready{{condition="true",{n2}}}'] == 1
        scrapes.append(_scrape(fleet, clock))
        clock.advance(30)
    assert [s[generation] for s in scrapes] == [1, 1, 2, 2, 2, 2]
    assert [s[restarts] for s in scrapes] == [0] * 6  # a replaced pod, not a restarted container
    assert scrapes[-1][f'kube_pod_status_ready{{condition="true",{pod}}}'] == 1  # ready after 60 s
    index = pd.date_range("2026-03-02T12:00:00Z", periods=len(scrapes), freq="30s")
    deploy, restart = FEEDS[1], FEEDS[0]
    found = rises(pd.Series([s[generation] for s in scrapes], index=index, dtype=float))
    assert [deploy.describe({"namespace": "llm", "deployment": "vllm"}, b, a) for _, b, a in found] == [
        "deployment llm/vllm rolled out (generation 1 to 2)"]
    assert (deploy.kind, restart.kind) == ("deploy", "restart")
    assert rises(pd.Series([s[restarts] for s in scrapes], index=index, dtype=float)) == []
