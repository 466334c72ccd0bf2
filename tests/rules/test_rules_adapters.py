"""The stock-exporter adapters (alert_rules/adapters/): promtool checks and unit tests, every
record tested, and every translated name one that Oximeter's own producers define."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from alert_rules import ADAPTERS_DIR, RULES_DIR, load_catalogue, load_groups, rule_files
from analyzer.signals.catalogue import CATALOGUE

PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
ADAPTER_FILES = rule_files(ADAPTERS_DIR)
TEST_FILES = sorted((ADAPTERS_DIR / "tests").glob("*.test.yml"))
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


def _promtool(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PROMTOOL, *map(str, args)], capture_output=True, text=True, timeout=120, cwd=cwd)


def _records(path: Path) -> list[dict[str, object]]:
    return [rule for group in load_groups(path) for rule in group["rules"] if "record" in rule]


def test_the_three_adapters_exist() -> None:
    assert [p.name for p in ADAPTER_FILES] == ["dcgm.rules.yml", "kubernetes.rules.yml", "vllm.rules.yml"]


def test_promtool_check_adapters() -> None:
    result = _promtool("check", "rules", *ADAPTER_FILES)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("test_file", TEST_FILES, ids=[p.name for p in TEST_FILES])
def test_promtool_adapter_unit_tests(test_file: Path) -> None:
    result = _promtool("test", "rules", test_file.name, cwd=test_file.parent)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("rules", ADAPTER_FILES, ids=[p.name for p in ADAPTER_FILES])
def test_every_adapter_record_is_queried_by_its_tests(rules: Path) -> None:
    test = yaml.safe_load((ADAPTERS_DIR / "tests" / rules.name.replace(".rules.", ".test.")).read_text())
    assert test["rule_files"] == [f"../{rules.name}"]
    queried = " ".join(case["expr"] for t in test["tests"] for case in t.get("promql_expr_test", []))
    untested = sorted({str(r["record"]) for r in _records(rules)} - set(re.findall(r"[\w:]+", queried)))
    assert untested == []


def test_translated_names_are_oximeter_names() -> None:
    """A record without colons is a translation: it must be a name Oximeter's producers define."""
    defined = {m["name"] for m in load_catalogue()}
    translated = {str(r["record"]) for p in ADAPTER_FILES for r in _records(p) if ":" not in str(r["record"])}
    families = {next((n.removesuffix(s) for s in HISTOGRAM_SUFFIXES
                      if n.endswith(s) and n.removesuffix(s) in defined), n) for n in translated}
    assert translated and families - defined == set()


def test_xid_events_cover_every_code_a_rule_reads() -> None:
    """The gauge's events are counted per code (PromQL cannot make a label of a value): every code
    that the signals and the Xid alerts read needs its own rule."""
    counted = {str(r["labels"]["xid"]) for r in _records(ADAPTERS_DIR / "dcgm.rules.yml")  # type: ignore[index]
               if r["record"] == "node_gpu_xid:oximeter_gpu_xid_errors:increase5m"}

    def codes(text: str) -> set[str]:
        return {code for found in re.findall(r'xid=~"([\d|]+)"', text) for code in found.split("|")}

    paging = codes(CATALOGUE["xid_paging"].promql)
    assert len(paging) >= 10
    assert counted == codes((RULES_DIR / "gpu.rules.yml").read_text()) | paging


def test_a_wrong_unit_fails(tmp_path: Path) -> None:
    """The unit tests can fail: MiB read as bytes is caught."""
    text = (ADAPTERS_DIR / "dcgm.rules.yml").read_text()
    assert "* 1048576" in text
    (tmp_path / "dcgm.rules.yml").write_text(text.replace("* 1048576", "* 1000000"))
    (tmp_path / "tests").mkdir()
    shutil.copy(ADAPTERS_DIR / "tests" / "dcgm.test.yml", tmp_path / "tests" / "dcgm.test.yml")
    result = _promtool("test", "rules", "dcgm.test.yml", cwd=tmp_path / "tests")
    assert result.returncode == 1
    assert "oximeter_gpu_memory_used_bytes" in result.stdout + result.stderr


def test_signals_read_the_translated_series(tmp_path: Path) -> None:
    """The catalogue's own queries, unchanged, find a DCGM GPU's temperature and a paging Xid."""
    shutil.copy(ADAPTERS_DIR / "dcgm.rules.yml", tmp_path / "dcgm.rules.yml")
    labels = ('gpu="0",UUID="GPU-0",pci_bus_id="00000000:8D:00.0",device="nvidia0",modelName="NVIDIA H100",'
              'Hostname="gpu-node-1",instance="10.0.0.5:9400",job="dcgm-exporter"')
    out = 'node="gpu-node-1",gpu="0",uuid="GPU-0",pci_bus_id="00000000:8D:00.0",gpu_model="NVIDIA H100"'
    test = {"rule_files": ["dcgm.rules.yml"], "evaluation_interval": "15s", "tests": [{
        "interval": "30s",
        "input_series": [{"series": f"DCGM_FI_DEV_GPU_TEMP{{{labels}}}", "values": "88x10"},
                         {"series": f"DCGM_FI_DEV_XID_ERRORS{{{labels}}}", "values": "0x3 79x7"}],
        "promql_expr_test": [
            {"expr": CATALOGUE["gpu_temperature"].promql, "eval_time": "4m",
             "exp_samples": [{"labels": f"{{{out}}}", "value": 88}]},
            {"expr": CATALOGUE["xid_paging"].promql, "eval_time": "4m",
             "exp_samples": [{"labels": f'{{{out},xid="79"}}', "value": 1}]},
        ]}]}
    (tmp_path / "signals.test.yml").write_text(yaml.safe_dump(test))
    result = _promtool("test", "rules", "signals.test.yml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
