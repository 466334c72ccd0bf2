"""``analyzer.inputs``: stock inputs name what their exporters lack and the signals that disables,
in ``oximeter config check`` and at the analyzer's start-up; Oximeter's own inputs lack nothing."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from analyzer.service.settings import AnalyzerSettings
from analyzer.signals.catalogue import CATALOGUE
from analyzer.signals.spec import SignalSpec
from analyzer.signals.stock_inputs import (
    DCGM_DEFAULT_FIELDS,
    AdapterRule,
    StockInputs,
    adapter_rules,
    describe,
)
from oximeter.cli import main

ECC = {"ecc_corrected_increase", "ecc_corrected_burn", "ecc_uncorrected_increase"}
# dcgm-exporter's default counters with the ECC fields it ships commented out turned on.
WITH_ECC = """# DCGM FIELD, Prometheus metric type, help message
DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).
DCGM_FI_DEV_XID_ERRORS, gauge, Value of the last XID error encountered.
DCGM_FI_DEV_ECC_SBE_VOL_TOTAL, counter, Total number of single-bit volatile ECC errors.
DCGM_FI_DEV_ECC_DBE_VOL_TOTAL, counter, Total number of double-bit volatile ECC errors.
# DCGM_FI_DEV_MAX_SM_CLOCK, gauge, Maximum SM clock
"""


def test_oximeter_inputs_lack_nothing() -> None:
    settings = AnalyzerSettings()
    assert settings.inputs == "oximeter"
    assert settings.missing_inputs() == []
    assert set(settings.catalogue()) == set(CATALOGUE)


def test_stock_defaults_name_the_missing_ecc_fields_and_their_signals() -> None:
    settings = AnalyzerSettings(inputs="stock")
    lines = settings.missing_inputs()
    sbe = next(line for line in lines if "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL" in line)
    assert sbe.startswith('analyzer.inputs: stock: oximeter_gpu_ecc_errors_total{kind="corrected"}')
    assert "ecc_corrected_increase" in sbe and "ecc_corrected_burn" in sbe
    dbe = next(line for line in lines if "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL" in line)
    assert "ecc_uncorrected_increase" in dbe
    # Gateway-only facts are named too, with who does have them.
    assert any("oximeter_requests_total" in line and "Oximeter's gateway" in line
               and "error_504_ratio" in line for line in lines)
    catalogue = settings.catalogue()
    assert not ECC & set(catalogue)
    assert {"error_504_ratio", "rejected_429_ratio", "queue_limit_ratio"}.isdisjoint(catalogue)
    # What the default counters, vLLM and the adapters do feed stays.
    assert {"gpu_temperature", "xid_paging", "pcie_replay_increase", "queue_wait_p99", "queue_length",
            "ttft_p99", "kv_cache_usage", "gpu_utilization_p95", "gpu_memory_trend"} <= set(catalogue)


def test_a_counters_file_with_ecc_feeds_the_ecc_signals(tmp_path: Path) -> None:
    counters = tmp_path / "counters.csv"
    counters.write_text(WITH_ECC)
    settings = AnalyzerSettings(inputs="stock", dcgm_counters=str(counters))
    assert set(settings.catalogue()) >= ECC
    lines = settings.missing_inputs()
    assert not any("ECC" in line for line in lines)
    # Commented out is not enabled: the max SM clock is still missing.
    assert any("DCGM_FI_DEV_MAX_SM_CLOCK" in line and "gpu_sm_clock_ratio" in line for line in lines)


def test_a_signal_fed_by_either_alternative_is_available() -> None:
    """xid_paging reads the exporter's counter or the events the DCGM adapter counts: the Xid
    gauge is a default field, so it stays although no default field gives the counter."""
    inputs = StockInputs(DCGM_DEFAULT_FIELDS)
    assert "xid_paging" not in inputs.unavailable(CATALOGUE)
    without_xid = StockInputs(DCGM_DEFAULT_FIELDS - {"DCGM_FI_DEV_XID_ERRORS"})
    assert "xid_paging" in without_xid.unavailable(CATALOGUE)


def test_the_answer_follows_the_rules_as_written() -> None:
    """A new signal on a translated series is judged by the rules that record it, with no list to update."""
    spec = SignalSpec(name="power", layer="infrastructure", kind="gauge", threshold=600,
                      promql="max without (instance, job) (oximeter_gpu_power_limit_watts)")
    rules = [r for r in adapter_rules() if r.record == "oximeter_gpu_power_limit_watts"]
    assert rules and rules[0].inputs == {"DCGM_FI_DEV_POWER_MGMT_LIMIT"}
    assert StockInputs(DCGM_DEFAULT_FIELDS).unavailable({"power": spec}) == {"power"}
    assert StockInputs({"DCGM_FI_DEV_POWER_MGMT_LIMIT"}).unavailable({"power": spec}) == set()
    invented = [AdapterRule("oximeter_gpu_power_limit_watts", {}, frozenset({"DCGM_FI_DEV_GPU_TEMP"}))]
    assert StockInputs({"DCGM_FI_DEV_GPU_TEMP"}, rules=invented).unavailable({"power": spec}) == set()
    [line] = describe(StockInputs(set(), rules=invented).missing({"power": spec}))
    assert line == ("oximeter_gpu_power_limit_watts: needs DCGM_FI_DEV_GPU_TEMP, which dcgm-exporter's "
                    "counters do not enable (add the line `DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature "
                    "(in C).` to its counters file); unavailable signals: power")


def test_config_check_names_missing_inputs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "stock.yaml"
    path.write_text("analyzer:\n  inputs: stock\n")
    assert main(["config", "check", str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"{path}: ok"
    assert any(line.startswith(f"{path}: analyzer.inputs: stock: ")
               and "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL" in line and "ecc_uncorrected_increase" in line
               for line in out)


@pytest.mark.parametrize(("text", "key", "says"), [
    ("analyzer:\n  inputs: dcgm\n", "analyzer.inputs", "'oximeter', 'stock' or 'mixed'"),
    ("analyzer:\n  inputs: stock\n  dcgm_counters: /nonexistent/counters.csv\n", "analyzer.dcgm_counters",
     "cannot read the dcgm-exporter counters file"),
])
def test_bad_inputs_name_file_and_key(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                      text: str, key: str, says: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    assert main(["config", "check", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"{path}: {key}: ") and says in err
    assert "Traceback" not in err


@pytest.mark.usefixtures("logs_to_stderr")
def test_the_analyzer_says_the_same_at_start_up(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--inputs stock`` over a file that says nothing: the same lines are logged before the
    source is opened (here a replay directory that does not exist, so it stops there)."""
    path = tmp_path / "oximeter.yaml"
    path.write_text("analyzer:\n  step_s: 15\n")
    code = main(["--config", str(path), "analyze", "--once", "--inputs", "stock",
                 "--replay", str(tmp_path / "absent"), "--store", str(tmp_path / "oximeter.db")])
    err = capsys.readouterr().err
    assert code == 2
    expected = AnalyzerSettings(inputs="stock").missing_inputs()
    assert expected and all(line in err for line in expected)


def test_the_guide_names_every_input_and_quotes_the_real_lines() -> None:
    guide = (Path(__file__).resolve().parents[2] / "docs" / "stock-telemetry.md").read_text()
    # Histograms by family name, selectors with their matchers.
    inputs = {re.sub(r"_(bucket|sum|count)$", "", name) for rule in adapter_rules() for name in rule.inputs}
    assert sorted(name for name in inputs if not re.search(rf"`{re.escape(name)}[`{{]", guide)) == []
    quoted = [line.removeprefix("stock.yaml: ") for line in guide.splitlines()
              if line.startswith("stock.yaml: analyzer.inputs")]
    assert quoted and set(quoted) <= set(AnalyzerSettings(inputs="stock").missing_inputs())
