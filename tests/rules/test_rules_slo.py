"""The SLO rules `oximeter rules build` writes: current when committed, written from the configured
objectives and burn rates, and read from stock vLLM telemetry as well as from the gateway's."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import yaml
from inprocess import run_main

from alert_rules import ADAPTERS_DIR, kubernetes
from analyzer.signals.recording_rules import SLO_RULES
from analyzer.signals.slo import SloSettings
from analyzer.signals.slo_rules import render_slos

PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
# A stock fleet's objective: aborted requests count (a client cut-off, 499, is bad), and 99 % of
# first tokens within 0.5 s (a bound of both the gateway's and vLLM's TTFT histograms).
STOCK = """\
analyzer: {inputs: stock}
slos:
  page_fast_burn: 12
  objectives:
    - name: stock
      availability: {target: 0.999, bad_codes: [5xx, "429", "499"]}
      latency: [{indicator: ttft, threshold_s: 0.5, target: 0.99}]
"""


def test_committed_slo_rules_are_the_defaults() -> None:
    assert SLO_RULES.read_text(encoding="utf-8") == render_slos(SloSettings()), "run `oximeter rules build`"


def _build(tmp_path: Path, config: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    (tmp_path / "oximeter.yaml").write_text(config, encoding="utf-8")
    out = tmp_path / "slo.rules.yml"
    done = run_main("--config", str(tmp_path / "oximeter.yaml"), "rules", "build", "--out",
                    str(tmp_path / "signals.rules.yml"), "--slo-out", str(out))
    return done, out


def test_a_build_written_elsewhere_leaves_the_shipped_objects_as_they_are(tmp_path: Path) -> None:
    manifests = {path: path.read_text(encoding="utf-8") for path in kubernetes.rendered()}
    done, _ = _build(tmp_path, STOCK)
    assert done.returncode == 0, done.stderr
    assert {path: path.read_text(encoding="utf-8") for path in manifests} == manifests


def test_rules_follow_the_configured_objectives_and_burn_rates(tmp_path: Path) -> None:
    done, out = _build(tmp_path, STOCK)
    assert done.returncode == 0, done.stderr
    groups = yaml.safe_load(out.read_text(encoding="utf-8"))["groups"]
    ratios = [(r["record"], r["labels"]["sli"]) for r in groups[0]["rules"]]
    windows = ("5m", "30m", "1h", "6h", "3d")
    assert ratios == [*((f"service:oximeter_slo_errors:ratio_rate{w}", "availability") for w in windows),
                      ("slo:oximeter_slo_error_budget:ratio", "availability"),
                      *((f"service:oximeter_slo_errors:ratio_rate{w}", "ttft") for w in windows),
                      ("slo:oximeter_slo_error_budget:ratio", "ttft")]
    page, ticket = groups[1]["rules"]
    assert page["expr"].count(">= 12\n") == 2 and page["expr"].count(">= 6\n") == 2
    assert ticket["expr"].count(">= 1\n") == 2
    check = subprocess.run([PROMTOOL, "check", "rules", str(out)], capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr


def test_an_invalid_objective_writes_nothing(tmp_path: Path) -> None:
    done, out = _build(tmp_path, "slos:\n  objectives: [{name: x, window_s: 60}]\n")
    assert done.returncode == 2
    assert "slos.objectives.0.window_s: Input should be greater than or equal to 259200" in done.stderr
    assert not out.exists()


STOCK_TEST = Path(__file__).resolve().parents[1] / "fixtures" / "rules" / "slo_stock.test.yml"


def test_stock_vllm_telemetry_feeds_the_objectives(tmp_path: Path) -> None:
    """vLLM's aborted requests (bad where client cut-offs are) and its TTFT histogram, through the
    stock adapter, give the same ratios and pages as the gateway's series."""
    done, _out = _build(tmp_path, STOCK)
    assert done.returncode == 0, done.stderr
    shutil.copy(ADAPTERS_DIR / "vllm.rules.yml", tmp_path / "vllm.rules.yml")
    shutil.copy(STOCK_TEST, tmp_path / "stock.test.yml")
    result = subprocess.run([PROMTOOL, "test", "rules", "stock.test.yml"], cwd=tmp_path, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
