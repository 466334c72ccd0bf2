"""The adapter rules over the exporters' real output (tests/fixtures/real/): every record whose
inputs a capture has is written, with Oximeter's labels and base units. The captures are scraped
as Prometheus would (job and instance added; vLLM's job adds the node), every 30s for 5 minutes."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from real_exposition import fixture as read_fixture

from alert_rules import ADAPTERS_DIR, RULES_DIR
from analyzer.signals.stock_inputs import adapter_rules

PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
MIB = 1048576
# fixture -> the labels its scrape job adds
SCRAPES = {
    "dcgm-exporter.prom": {"job": "dcgm-exporter", "instance": "10.0.0.5:9400"},
    "dcgm-exporter-derived.prom": {"job": "dcgm-exporter", "instance": "10.0.0.6:9400"},
    "vllm-v1.prom": {"job": "vllm", "instance": "10.0.0.7:8000", "node": "gpu-node-1"},
    "kube-state-metrics.prom": {"job": "kube-state-metrics", "instance": "10.0.0.8:8080"},
}
L4 = ('node="i-030791dc5a37cd257",gpu="0",uuid="GPU-c2f76b33-7953-256e-8f33-1343419b1a1c",'
      'pci_bus_id="00000000:31:00.0",gpu_model="NVIDIA L4",instance="10.0.0.5:9400",job="dcgm-exporter"')
MIG = ('node="gpu-a",gpu="1",uuid="GPU-9c1d2e3f-4a5b-4c6d-8e7f-90a1b2c3d4e5",pci_bus_id="00000000:2A:00.0",'
       'gpu_model="NVIDIA H100 80GB HBM3",instance="10.0.0.6:9400",job="dcgm-exporter"')
GPU_A0 = ('node="gpu-a",gpu="0",uuid="GPU-5e0a2c11-7d3f-4b8e-9a61-0c2f3b4d5e6f",'
          'pci_bus_id="00000000:18:00.0",gpu_model="NVIDIA H100 80GB HBM3"')
GPU_B0 = ('node="gpu-b",gpu="0",uuid="GPU-1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d",'
          'pci_bus_id="00000000:18:00.0",gpu_model="NVIDIA H100 80GB HBM3"')
DCGM_B = ',instance="10.0.0.6:9400",job="dcgm-exporter"'
POD = 'node="gpu-node-1",namespace="llm",pod="vllm-6f8d9c7b5-x2k4p"'
ENGINE = 'model="Qwen/Qwen3-8B",service="Qwen/Qwen3-8B",node="gpu-node-1",instance="10.0.0.7:8000",job="vllm"'
# Records with the exact samples a capture must give: units and labels written out by hand.
EXPECTED: dict[str, list[tuple[str, list[tuple[str, float]]]]] = {
    "dcgm-exporter.prom": [
        ("oximeter_gpu_temperature_celsius", [(L4, 31)]),
        ("oximeter_gpu_power_watts", [(L4, 16.365)]),
        ("oximeter_gpu_sm_clock_hertz", [(L4, 210e6)]),
        ("oximeter_gpu_utilization_ratio", [(L4, 0)]),
        # used + free + reserved: 0 + 22563 + 470 MiB
        ("oximeter_gpu_memory_total_bytes", [(L4, 23033 * MIB)]),
        ("oximeter_gpu_up", [(L4, 1)]),
        ("oximeter_gpu_remapped_rows", [('kind="correctable",' + L4, 0), ('kind="uncorrectable",' + L4, 0)]),
    ],
    "dcgm-exporter-derived.prom": [
        # Each MIG instance stays a series of its own; gpu-b's node comes from `hostname`, its pod is dropped.
        ("oximeter_gpu_temperature_celsius{gpu_model=\"NVIDIA H100 80GB HBM3\"}", [
            (GPU_A0 + DCGM_B, 44),
            ('gpu_instance="1",' + MIG, 51), ('gpu_instance="2",' + MIG, 51),
            (GPU_B0 + DCGM_B, 47)]),
        # The Xid series appear (with their err_code) a minute after the GPUs: one event each.
        ("node_gpu_xid:oximeter_gpu_xid_errors:increase5m", [
            ('xid="79",' + GPU_A0, 1), ('xid="48",' + GPU_B0, 1)]),
    ],
    "vllm-v1.prom": [
        ("oximeter_queue_length", [(ENGINE, 1)]),
        ("oximeter_queue_wait_seconds_bucket{le=\"0.3\"}", [('le="0.3",' + ENGINE, 25)]),
        ("oximeter_time_to_first_token_seconds_count", [(ENGINE, 100)]),
        ("oximeter_request_duration_seconds_sum", [(ENGINE, 412.5)]),
    ],
    "kube-state-metrics.prom": [
        ("node:kube_node_ready:max", [('node="gpu-node-1"', 1)]),
        ("node_pod:kube_pod_ready:max", [(POD, 1)]),
        ("namespace_deployment:kube_deployment_status_replicas_unavailable:max{deployment=\"failingtest\"}",
         [('namespace="default",deployment="failingtest"', 1)]),
    ],
}
# Fields whose series a capture holds from the start; the Xid series of the derived capture start later.
LATE = {"DCGM_FI_DEV_XID_ERRORS": "_x2 "}


def _series(fixture: str) -> list[dict[str, str]]:
    out = []
    for s in read_fixture(fixture)[1]:
        labels = {**dict(s.labels), **SCRAPES[fixture]}
        selector = s.name + "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}"
        late = LATE.get(s.name, "") if fixture.endswith("derived.prom") else ""
        steps = 10 - (2 if late else 0)
        out.append({"series": selector, "values": f"{late}{s.value!r}x{steps}"})
    return out


def _names(fixture: str) -> set[str]:
    return {s.name for s in read_fixture(fixture)[1]}


def _promtool_test(tmp_path: Path, fixture: str,
                   cases: list[dict[str, object]]) -> subprocess.CompletedProcess[str]:
    for path in (*ADAPTERS_DIR.glob("*.rules.yml"), RULES_DIR / "gpu.rules.yml"):
        shutil.copy(path, tmp_path / path.name)
    test = {"rule_files": sorted(p.name for p in tmp_path.glob("*.rules.yml")), "evaluation_interval": "15s",
            "tests": [{"interval": "30s", "input_series": _series(fixture), "promql_expr_test": cases}]}
    (tmp_path / "real.test.yml").write_text(yaml.safe_dump(test, width=1_000_000))
    return subprocess.run([PROMTOOL, "test", "rules", "real.test.yml"], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)


@pytest.mark.parametrize("fixture", sorted(SCRAPES))
def test_the_adapters_translate_each_real_capture(fixture: str, tmp_path: Path) -> None:
    names = _names(fixture)
    # Every translation whose input the capture has is written (the Xid events only where one happened).
    fed = sorted({r.record for r in adapter_rules() if r.inputs & names and "xid" not in r.labels})
    assert fed, fixture
    cases: list[dict[str, object]] = [{"expr": f"group({record})", "eval_time": "4m",
                                       "exp_samples": [{"labels": "{}", "value": 1}]} for record in fed]
    for expr, samples in EXPECTED[fixture]:
        name = expr.split("{", 1)[0]
        cases.append({"expr": expr, "eval_time": "4m", "exp_samples": [
            {"labels": f"{name}{{{labels}}}", "value": value} for labels, value in samples]})
    result = _promtool_test(tmp_path, fixture, cases)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_wrong_expectation_fails(tmp_path: Path) -> None:
    """The harness can fail: the L4's temperature read as 30 is caught."""
    case = {"expr": "oximeter_gpu_temperature_celsius", "eval_time": "4m",
            "exp_samples": [{"labels": f"oximeter_gpu_temperature_celsius{{{L4}}}", "value": 30}]}
    result = _promtool_test(tmp_path, "dcgm-exporter.prom", [case])
    assert result.returncode == 1 and "oximeter_gpu_temperature_celsius" in result.stdout + result.stderr
