"""A shard's node matchers on the queries that read a pod's kube-state-metrics series, evaluated
by promtool (Prometheus's own engine): the restart feed of a shard by node reads its own pods'
restarts, joined to their node through kube_pod_info, and the other shard's pods only there."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

from analyzer.service.kube_changes import FEEDS
from oximeter.promql import with_matchers

ROOT = Path(__file__).resolve().parents[2]
# kube-state-metrics v2 series with their real label sets: vllm-0 on gpu-node-1 restarts once at
# 2m, vllm-1 on gpu-node-2 does not.
INPUTS = ROOT / "alert_rules" / "adapters" / "tests" / "kubernetes.test.yml"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"


def test_a_node_shard_reads_its_pods_restarts_through_kube_pod_info(tmp_path: Path) -> None:
    first: dict[str, Any] = yaml.safe_load(INPUTS.read_text())["tests"][0]
    [restarts] = [f.spec.promql for f in FEEDS if f.spec.name == "kube_pod_container_restarts"]
    cases = [('node="gpu-node-1"', "gpu-node-1", "vllm-0", 1),
             ('node!="gpu-node-1"', "gpu-node-2", "vllm-1", 0)]
    tests = [{"expr": with_matchers(restarts, selector), "eval_time": "5m", "exp_samples": [
        {"labels": f'{{namespace="llm",node="{node}",pod="{pod}"}}', "value": value}]}
        for selector, node, pod, value in cases]
    path = tmp_path / "shard.test.yml"
    path.write_text(yaml.safe_dump({"rule_files": [], "evaluation_interval": "15s", "tests": [
        {"interval": first["interval"], "input_series": first["input_series"], "promql_expr_test": tests}]}))
    done = subprocess.run([PROMTOOL, "test", "rules", str(path)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    # The pod's own series take no node matcher: it carries no node label to match.
    assert 'kube_pod_container_status_restarts_total)' in tests[0]["expr"]
    assert 'kube_pod_info{node="gpu-node-1"}' in tests[0]["expr"]
