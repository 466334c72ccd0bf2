"""Round trip: the exporter's dcgm-exporter names, put through the DCGM adapter rules, give back
the exporter's own series (same names, labels and base-unit values) for every field translated."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import yaml
from exporter_harness import NODE, exposition
from fake_pynvml import FakeNvml
from prometheus_client.parser import text_string_to_metric_families

from alert_rules import ADAPTERS_DIR
from analyzer.signals.stock_inputs import adapter_rules
from exporter.backends.nvml import NvmlBackend
from exporter.collector import GpuCollector

PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
DCGM_JOB = ',instance="dcgm:9400",job="dcgm-exporter"'


def _samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    return [(s.name, s.labels, s.value) for fam in text_string_to_metric_families(text) for s in fam.samples]


def _selector(name: str, labels: dict[str, str], extra: str = "") -> str:
    return name + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + extra + "}"


def test_dcgm_names_translate_back_to_the_exporters_own(tmp_path: Path) -> None:
    nvml = NvmlBackend(nvml=FakeNvml())
    nvml.start()
    try:
        samples = _samples(exposition(GpuCollector(nvml, NODE, naming="dcgm")))
    finally:
        nvml.close()
    dcgm = [s for s in samples if s[0].startswith("DCGM_")]
    exported = {name for name, _, _ in dcgm}
    # Translations whose inputs this exposition has, and the label values each rule sets.
    wanted: dict[str, list[dict[str, str]]] = {}
    # (Not the Xid events: a steady exposition has no change of code, so nothing to give back.)
    for rule in adapter_rules():
        if ":" not in rule.record and "xid" not in rule.labels and rule.inputs & exported:
            wanted.setdefault(rule.record, []).append(dict(rule.labels))
    assert {"oximeter_gpu_temperature_celsius", "oximeter_gpu_memory_total_bytes",
            "oximeter_gpu_ecc_errors_total", "oximeter_gpu_sm_clock_max_hertz"} <= set(wanted)
    cases = []
    for name, label_sets in sorted(wanted.items()):
        native = [(labels, value) for n, labels, value in samples if n == name
                  and any(all(labels.get(k) == v for k, v in fixed.items()) for fixed in label_sets)]
        assert native, name
        cases.append({"expr": name, "eval_time": "1m", "exp_samples": [
            {"labels": _selector(name, labels, DCGM_JOB), "value": value} for labels, value in native]})
    test = {"rule_files": ["dcgm.rules.yml"], "evaluation_interval": "15s", "tests": [{
        "interval": "30s",
        "input_series": [{"series": _selector(name, labels, DCGM_JOB), "values": f"{value!r}x4"}
                         for name, labels, value in dcgm],
        "promql_expr_test": cases}]}
    shutil.copy(ADAPTERS_DIR / "dcgm.rules.yml", tmp_path / "dcgm.rules.yml")
    (tmp_path / "roundtrip.test.yml").write_text(yaml.safe_dump(test))
    result = subprocess.run([PROMTOOL, "test", "rules", "roundtrip.test.yml"], capture_output=True, text=True,
                            timeout=120, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
