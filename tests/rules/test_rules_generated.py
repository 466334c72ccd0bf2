"""The analyzer's recording rules are generated from its signal catalogue: the committed file is
current, ``--check`` says so, and a catalogue change shows up in the rendered rules."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml
from inprocess import run_main

from alert_rules import alerting_rules, recording_rules
from analyzer.detection.judges import detectors_of
from analyzer.signals.catalogue import CATALOGUE, build_catalogue
from analyzer.signals.recording_rules import SIGNALS_RULES, render, rendered_adapters
from analyzer.signals.sources import stock
from stack.procs import oximeter_argv


def test_committed_signal_rules_are_current() -> None:
    """Fails when the catalogue changed without `oximeter rules build`."""
    assert SIGNALS_RULES.read_text(encoding="utf-8") == render(), "run `oximeter rules build` and commit it"


def test_committed_adapter_rules_are_current() -> None:
    """Fails when the stock translation's tables changed without `oximeter rules build`."""
    for path, text in rendered_adapters().items():
        assert path.read_text(encoding="utf-8") == text, f"{path.name}: run `oximeter rules build`"


def test_an_adapter_translation_is_rendered_from_the_table(monkeypatch: pytest.MonkeyPatch) -> None:
    table = {"DCGM_FI_DEV_NEW_FIELD": ("oximeter_gpu_new_ratio", 0.01, {"kind": "x"})}
    monkeypatch.setattr(stock, "DCGM_GAUGES", table)
    rules = yaml.safe_load("\n".join(stock.render_dcgm()))
    [rule] = [r for r in rules if r["record"] == "oximeter_gpu_new_ratio"]
    assert rule["labels"] == {"kind": "x"}
    assert "DCGM_FI_DEV_NEW_FIELD," in rule["expr"] and ")) / 100\n" in rule["expr"]
    with pytest.raises(ValueError, match="no rendered part"):
        stock.spliced("groups: []\n", [], "x.rules.yml")


def test_the_xid_rules_are_rendered_from_the_xid_lists(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stock, "PAGING_XIDS", (79, 48))
    monkeypatch.setattr(stock, "APPLICATION_XIDS", (13,))
    rules = yaml.safe_load("\n".join(stock.render_dcgm()))
    codes = [(r["record"], r["labels"]["xid"]) for r in rules if "xid" in r.get("labels", {})]
    records = ("node_gpu_xid:oximeter_gpu_xid_errors:increase5m", "oximeter_gpu_xid_last_timestamp_seconds")
    assert codes == [(record, code) for code in ("13", "48", "79") for record in records]


def test_every_record_a_signal_names_is_written_once_with_its_query() -> None:
    by_name: dict[str, list[str]] = {}
    for rule in recording_rules():
        by_name.setdefault(rule["record"], []).append(rule["expr"])
    for spec in CATALOGUE.values():
        if spec.record is not None:
            assert by_name[spec.record] == [spec.promql], spec.name


def test_two_signals_of_one_record_share_its_query() -> None:
    """A node's median inter-token latency is judged against its peers and against its own past
    from one recording rule; a configured query for one of them alone cannot take the record."""
    shared = [s.name for s in CATALOGUE.values() if s.record == CATALOGUE["engine_itl_p50"].record]
    assert shared == ["engine_itl_peer", "engine_itl_p50"]
    record = CATALOGUE["engine_itl_p50"].record
    changed = build_catalogue({"engine_itl_p50": {"promql": "vector(1)", "record": record}})
    mended = r"analyzer.signals.engine_itl_p50: its query differs from engine_itl_peer's"
    with pytest.raises(ValueError, match=mended):
        render(changed)


def test_rendering_follows_the_catalogue() -> None:
    query = "max without (instance, job) (oximeter_queue_length)"
    changed = build_catalogue({"queue_length": {"promql": query, "record": CATALOGUE["queue_length"].record}})
    rules = yaml.safe_load(render(changed))["groups"][0]["rules"]
    assert {r["record"]: r["expr"] for r in rules}["service_node:oximeter_queue_length:max_1m"] == query
    assert render(changed) != render()


def test_check_flags_a_stale_file(tmp_path: Path) -> None:
    stale = tmp_path / "signals.rules.yml"
    stale.write_text(render().replace("max_over_time", "min_over_time"), encoding="utf-8")
    check = subprocess.run(oximeter_argv("rules", "build", "--check", "--out", str(stale)),
                           capture_output=True, text=True, timeout=120, check=False)
    assert check.returncode == 1 and "stale" in check.stderr  # what CI sees: the command's exit status
    build = _rules_build("--out", str(stale))
    assert build.returncode == 0, build.stderr
    assert stale.read_text(encoding="utf-8") == SIGNALS_RULES.read_text(encoding="utf-8")
    again = _rules_build("--check", "--out", str(stale))
    assert again.returncode == 0, again.stderr


# Hand-written alerts that judge a catalogue signal's own limit: (alert, signal, field, comparison).
ALERT_LIMITS = [
    ("GpuTemperatureHigh", "gpu_temperature", "threshold", ">"),
    ("GpuSaturated", "gpu_utilization_p95", "threshold", ">"),
    ("GpuEccCorrectedStorm", "ecc_corrected_increase", "increase", ">"),
    ("GpuEccCorrectedRising", "ecc_corrected_increase", "ratio", ">="),
    ("GpuEccCorrectedSlowBurn", "ecc_corrected_burn", "increase", ">"),
    ("GpuPcieReplayBurst", "pcie_replay_increase", "increase", ">"),
    ("GpuMemoryGrowing", "gpu_memory_trend", "capacity", ">="),
    ("EngineEmptyOutputs", "empty_output_ratio", "threshold", ">"),
    ("EngineKvCacheFull", "kv_cache_usage", "threshold", ">="),
    ("EnginePreemptionStorm", "preemption_rate", "threshold", ">"),
    ("GatewayQueueBacklog", "queue_length", "threshold", ">"),
    ("GatewayQueueNearLimit", "queue_limit_ratio", "threshold", ">="),
    ("GatewayQueueWaitHigh", "queue_wait_p99", "threshold", ">"),
    ("Gateway504RatioHigh", "error_504_ratio", "threshold", ">"),
    ("ExternalQueueGrowing", "external_queue_growth", "threshold", ">"),
    ("GatewayRetryStorm", "retry_ratio", "threshold", ">"),
]


@pytest.mark.parametrize(("alert", "signal", "field", "op"), ALERT_LIMITS, ids=[a[0] for a in ALERT_LIMITS])
def test_alerts_compare_with_the_catalogues_limits(alert: str, signal: str, field: str, op: str) -> None:
    """An alert and the analyzer judge a signal at the same limit: a catalogue default changed
    without its alert (or the reverse) fails here."""
    expr = " ".join(next(r for r in alerting_rules() if r["alert"] == alert)["expr"].split())
    limit = getattr(CATALOGUE[signal], field)
    assert re.search(rf"{re.escape(op)} {limit:g}(?![\d.])", expr), (expr, limit)


def _alert_expr(alert: str) -> str:
    return " ".join(next(r for r in alerting_rules() if r["alert"] == alert)["expr"].split())


def test_the_504_alert_and_signal_share_their_traffic_guard() -> None:
    guard = CATALOGUE["error_504_ratio"].min_traffic
    assert guard is not None and f"increase1m >= {guard.minimum:g}" in _alert_expr("Gateway504RatioHigh")


def test_the_empty_output_alert_and_signal_share_their_traffic_guard() -> None:
    guard = CATALOGUE["empty_output_ratio"].min_traffic
    assert guard is not None and f"{guard.promql} >= {guard.minimum:g}" in _alert_expr("EngineEmptyOutputs")


def test_the_retry_alert_and_signal_share_their_traffic_guard() -> None:
    guard = CATALOGUE["retry_ratio"].min_traffic
    assert guard is not None and f"{guard.promql} >= {guard.minimum:g}" in _alert_expr("GatewayRetryStorm")


def test_the_external_queue_alert_and_signal_share_their_drain_guard() -> None:
    guard = CATALOGUE["external_queue_growth"].min_traffic
    assert guard is not None and f"{guard.promql} >= {guard.minimum:g}" in _alert_expr("ExternalQueueGrowing")


def test_the_gpu_memory_alert_projects_as_far_as_the_trend_detector() -> None:
    """The alert's horizon is the trend criterion said as a time: a rise of ``min_rise_rel`` of the
    headroom per window fills the card in window / min_rise_rel."""
    spec = CATALOGUE["gpu_memory_trend"]
    (trend,) = detectors_of(spec)
    horizon = spec.window_s / trend.min_rise_rel  # type: ignore[attr-defined]
    projection = f"predict_linear({spec.record}[{spec.window_s / 60:g}m], {horizon:g})"
    assert projection in _alert_expr("GpuMemoryGrowing")


def _rules_build(*args: str) -> subprocess.CompletedProcess[str]:
    return run_main("rules", "build", *args)
