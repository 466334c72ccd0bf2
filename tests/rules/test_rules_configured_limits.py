"""A limit set in the configuration reaches every place that shows it: the analyzer's detector, the
generated alert (which then fires at the new line), the dashboard's threshold and the digest chart."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import yaml
from inprocess import run_main

from alert_rules import RULES_DIR, alerting_rules
from analyzer.detection.detectors.threshold import AbsoluteThreshold
from analyzer.detection.judges import detectors_of
from analyzer.service.limits import configured_catalogue, limits
from analyzer.service.settings import AnalyzerSettings
from analyzer.signals.alert_limits import ALERT_LIMITS
from analyzer.signals.catalogue import CATALOGUE
from analyzer.signals.recording_rules import alert_templates
from analyzer.signals.slo import SloSettings
from oximeter.config import load_section
from reporter.chart import PANELS, chart_limits, figure
from reporter.digest_budget import CHART_PREFIX

PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
SHIPPED, CONFIGURED = CATALOGUE["queue_wait_p99"].threshold, 0.5
_GATEWAY = 'service="chat",model="m",node="n1",instance="gw1:9000",job="oximeter-gateway"'


def _wait_case(expect_alert: bool) -> dict[str, Any]:
    """One promtool case: 40 waits a minute, every one in (0.2 s, 1 s], so the 1-min p99 is 0.992 s
    (interpolated in its bucket): over the configured 0.5 s, under the shipped 1 s."""
    def bucket(le: str, values: str) -> dict[str, str]:
        return {"series": f'oximeter_queue_wait_seconds_bucket{{le="{le}",{_GATEWAY}}}', "values": values}

    fired = [{"exp_labels": {"severity": "critical", "layer": "scheduling", "service": "chat", "model": "m",
                             "node": "n1"},
              "exp_annotations": {
                  "summary": "Requests wait more than 0.5 s in the gateway queue (p99).",
                  "description": "queue_wait p99 of chat on n1 is 992ms (healthy < 200ms).",
                  "runbook_url": "docs/runbook.md#gatewayqueuewaithigh"}}]
    return {"rule_files": ["scheduling.rules.yml"], "evaluation_interval": "15s", "tests": [{
        "interval": "15s",
        "input_series": [bucket("0.2", "0x20"), bucket("1", "0+10x20"), bucket("+Inf", "0+10x20"),
                         {"series": f"oximeter_queue_wait_seconds_count{{{_GATEWAY}}}", "values": "0+10x20"}],
        "alert_rule_test": [{"eval_time": "4m", "alertname": "GatewayQueueWaitHigh",
                             "exp_alerts": fired if expect_alert else []}]}]}


def _promtool_case(rules_dir: Path, expect_alert: bool) -> subprocess.CompletedProcess[str]:
    (rules_dir / "wait.test.yml").write_text(yaml.safe_dump(_wait_case(expect_alert)), encoding="utf-8")
    return subprocess.run([PROMTOOL, "test", "rules", "wait.test.yml"], cwd=rules_dir, capture_output=True,
                          text=True, timeout=60, check=False)


def _red_step(dashboard: dict[str, Any], title: str) -> float:
    [panel] = [p for p in dashboard["panels"] if p["title"] == title]
    steps = panel["fieldConfig"]["defaults"]["thresholds"]["steps"]
    [red] = [s["value"] for s in steps if s["color"] == "red"]
    return float(red)


def test_a_configured_queue_wait_limit_moves_the_analyzer_the_alert_the_dashboard_and_the_chart(
        tmp_path: Path) -> None:
    assert SHIPPED == 1.0
    config = tmp_path / "oximeter.yaml"
    config.write_text(f"analyzer:\n  signals:\n    queue_wait_p99:\n      threshold: {CONFIGURED}\n",
                      encoding="utf-8")
    shipped_files = {p: p.read_text(encoding="utf-8") for p in RULES_DIR.glob("*.rules.yml")}

    # The analyzer: the signal it evaluates, and the detector it runs, judge at 0.5 s.
    spec = load_section("analyzer", AnalyzerSettings, config).catalogue()["queue_wait_p99"]
    assert spec.threshold == CONFIGURED
    assert [d.threshold for d in detectors_of(spec) if isinstance(d, AbsoluteThreshold)] == [CONFIGURED]

    # The alert: `rules build` with the configuration writes GatewayQueueWaitHigh at 0.5 s...
    rules = tmp_path / "rules"
    rules.mkdir()
    built = run_main("--config", str(config), "rules", "build", "--alerts-dir", str(rules), "--out",
                     str(tmp_path / "signals.rules.yml"), "--slo-out", str(tmp_path / "slo.rules.yml"))
    assert built.returncode == 0, built.stderr
    alert = next(r for r in alerting_rules(rules) if r["alert"] == "GatewayQueueWaitHigh")
    expr = " ".join(alert["expr"].split())
    assert "service_node:oximeter_queue_wait_seconds:p99_1m > 0.5 and" in expr, expr
    # ... and it fires on a 0.992 s p99 that the shipped rule (1 s) lets pass.
    shipped = tmp_path / "shipped"
    shipped.mkdir()
    shutil.copy(RULES_DIR / "scheduling.rules.yml", shipped)
    for rules_dir, fires in ((rules, True), (shipped, False)):
        case = _promtool_case(rules_dir, fires)
        assert case.returncode == 0, (rules_dir.name, case.stdout, case.stderr)
    # A build written elsewhere leaves the shipped rules as `rules build --check` wants them.
    assert {p: p.read_text(encoding="utf-8") for p in RULES_DIR.glob("*.rules.yml")} == shipped_files
    assert run_main("rules", "build", "--check").returncode == 0

    # The dashboard: the overview's queue-wait tile turns red at 0.5 s.
    boards = tmp_path / "dashboards"
    assert run_main("--config", str(config), "dashboards", "build", "--out", str(boards)).returncode == 0
    overview = json.loads((boards / "overview.json").read_text(encoding="utf-8"))
    assert _red_step(overview, "Queue wait p99") == CONFIGURED

    # The digest chart: the queue-wait panel's line at 0.5 s (the shipped catalogue's at 1 s).
    for catalogue, line in ((configured_catalogue(config), CONFIGURED), (CATALOGUE, SHIPPED)):
        fig = figure({}, "digest", chart_limits(limits(catalogue)))
        try:
            panel = [key for key, _, _ in PANELS].index("queue_wait_p99_s")
            assert [np.asarray(h.get_ydata()).tolist() for h in fig.axes[panel].lines] == [[line, line]]
        finally:
            plt.close(fig)


# Each alert a limit of no single signal reaches, one number of it, the line of its rule that must show
# it, and what the rule multiplies it by (twice an objective).
_MEMORY = "node_gpu:oximeter_gpu_memory_used:ratio"
_TTFT = "service_node:oximeter_time_to_first_token_seconds:p99_5m"
_ALERT_LIMIT_CASES = (
    ("GpuMemoryFull", "gpu_memory_full", "threshold", 0.95, _MEMORY + " >= {}", 1),
    ("GpuMemoryGrowing", "gpu_memory_full", "threshold", 0.95, _MEMORY + " < {}", 1),
    ("CacheHitRatioLow", "cache_hit_ratio_low", "threshold", 0.4,
     "cache:oximeter_cache_requests_hit:ratio_5m < {}", 1),
    ("GpuIdleWhileQueueing", "healthy_queue_wait", "threshold", 0.5,
     "service_node:oximeter_queue_wait_seconds:p99_5m > {}", 1),
    ("GpuIdleWhileQueueing", "gpu_idle_while_queueing", "queue_length", 8,
     "service_node:oximeter_queue_length:max_1m > {}", 1),
    ("GpuIdleWhileQueueing", "gpu_idle_while_queueing", "utilization", 0.2,
     "oximeter_gpu_utilization_ratio[5m])) < {}", 1),
    ("GatewayConcurrencySaturated", "gateway_concurrency_saturated", "threshold", 0.8,
     "service_node:oximeter_inflight_requests:ratio_limit >= {}", 1),
    ("EngineStreamErrors", "engine_stream_errors", "threshold", 0.03,
     "(increase(oximeter_time_to_first_token_seconds_count[5m])) > {}", 1),
    ("EngineStreamErrors", "engine_stream_errors", "min_traffic", 40,
     "(increase(oximeter_time_to_first_token_seconds_count[5m])) >= {}", 1),
    ("TtftP99AboveSlo", "ttft_p99_above_slo", "slo", 1.5, _TTFT + " > {}", 2),
    ("RequestP99AboveSla", "request_p99_above_sla", "sla", 20,
     "service_node_route:oximeter_request_duration_seconds:p99_5m > {}", 2),
    ("TtftAboveYesterday", "ttft_above_yesterday", "floor", 0.3, _TTFT + " > {}", 1),
)


def test_a_configured_alert_limit_moves_the_alerts_that_judge_no_single_signal(tmp_path: Path) -> None:
    overrides: dict[str, dict[str, float]] = {}
    for _, name, field, configured, _, _ in _ALERT_LIMIT_CASES:
        assert ALERT_LIMITS[name][field] != configured  # the case could fail
        overrides.setdefault(name, {})[field] = configured
    config = tmp_path / "oximeter.yaml"
    config.write_text(yaml.safe_dump({"analyzer": {"alert_limits": overrides}}), encoding="utf-8")
    rules = tmp_path / "rules"
    rules.mkdir()
    built = run_main("--config", str(config), "rules", "build", "--alerts-dir", str(rules), "--out",
                     str(tmp_path / "signals.rules.yml"), "--slo-out", str(tmp_path / "slo.rules.yml"))
    assert built.returncode == 0, built.stderr
    for alert, name, field, configured, line, factor in _ALERT_LIMIT_CASES:
        for rules_dir, number in ((rules, configured), (RULES_DIR, ALERT_LIMITS[name][field])):
            [rule] = [r for r in alerting_rules(rules_dir) if r["alert"] == alert]
            expected = line.format(f"{number * factor:g}")
            assert expected in " ".join(rule["expr"].split()), (rules_dir, alert)
    # The overview dashboard's TTFT tile: orange at the configured objective, red at twice it.
    boards = tmp_path / "dashboards"
    assert run_main("--config", str(config), "dashboards", "build", "--out", str(boards)).returncode == 0
    overview = json.loads((boards / "overview.json").read_text(encoding="utf-8"))
    [tile] = [p for p in overview["panels"] if p["title"] == "TTFT p99 (SLO 1.5 s)"]
    steps = tile["fieldConfig"]["defaults"]["thresholds"]["steps"]
    assert [s["value"] for s in steps if s["color"] in ("orange", "red")] == [1.5, 3]


def test_an_alert_limit_the_alerts_do_not_have_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "oximeter.yaml"
    config.write_text("analyzer:\n  alert_limits:\n    gpu_memory_full:\n      ceiling: 0.9\n",
                      encoding="utf-8")
    checked = run_main("config", "check", str(config))
    assert checked.returncode != 0
    assert "analyzer.alert_limits.gpu_memory_full.ceiling" in checked.stdout + checked.stderr


def test_every_alert_limit_is_written_in_a_template_and_named_apart_from_the_signals() -> None:
    templates = "".join(t.read_text(encoding="utf-8") for t in alert_templates())
    for name, fields in ALERT_LIMITS.items():
        assert name not in CATALOGUE
        for field in fields:
            assert f"[[{name}.{field}" in templates, f"{name}.{field}"


def test_the_digest_chart_draws_the_configured_ticket_burn() -> None:
    burn_panel = [key for key, _, _ in PANELS].index(CHART_PREFIX)
    for slos, line in ((None, SloSettings().ticket_burn), (SloSettings(ticket_burn=2.5), 2.5)):
        fig = figure({}, "digest", chart_limits(limits(), slos))
        try:
            assert [np.asarray(h.get_ydata()).tolist() for h in fig.axes[burn_panel].lines] == [[line, line]]
        finally:
            plt.close(fig)
