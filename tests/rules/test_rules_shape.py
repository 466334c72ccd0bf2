"""Every alert has the same shape (kubernetes-mixin style) and a runbook section; recording rules
are named level:metric:operation and aggregate away instance and job."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from alert_rules import alerting_rules, recording_rules, rule_files
from oximeter.promql import metric_names
from oximeter.vocabulary import LAYERS, SEVERITIES
from oximeter.xids import xid_pattern

RUNBOOK = Path(__file__).resolve().parents[2] / "docs" / "runbook.md"
ALERTS = alerting_rules()


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def runbook_anchors() -> set[str]:
    lines = RUNBOOK.read_text().splitlines()
    return {github_anchor(line.lstrip("#")) for line in lines if line.startswith("#")}


@pytest.mark.parametrize("rule", ALERTS, ids=[r["alert"] for r in ALERTS])
def test_alert_shape(rule: dict[str, Any]) -> None:
    assert set(rule["labels"]) == {"severity", "layer"}
    assert rule["labels"]["severity"] in SEVERITIES
    assert rule["labels"]["layer"] in LAYERS
    annotations = rule["annotations"]
    assert set(annotations) == {"summary", "description", "runbook_url"}
    assert "{{" not in annotations["summary"]  # static, so notifications group well
    assert "$value" in annotations["description"]
    if rule["alert"] not in ("Watchdog", "AnalyzerSourceDown"):  # entity-less by nature
        assert "$labels." in annotations["description"]
    assert annotations["runbook_url"] == f"docs/runbook.md#{rule['alert'].lower()}"
    assert rule["alert"].lower() in runbook_anchors()
    assert "or vector(0)" not in rule["expr"].replace("  ", " ")


def test_alert_names_are_unique() -> None:
    names = [r["alert"] for r in ALERTS]
    assert len(names) == len(set(names))


def test_paging_xid_set_matches_the_contract() -> None:
    rule = next(r for r in ALERTS if r["alert"] == "GpuXidCritical")
    # Every selector of the alert is the one paging set (oximeter/xids.py), spelled the same.
    assert set(re.findall(r'xid=~"([\d|]+)"', rule["expr"])) == {xid_pattern()}
    assert "changes(oximeter_gpu_xid_last_timestamp_seconds" in rule["expr"]
    assert rule["labels"]["severity"] == "critical"


def test_watchdog_always_fires() -> None:
    rule = next(r for r in ALERTS if r["alert"] == "Watchdog")
    assert rule["expr"].strip() == "vector(1)"
    assert "for" not in rule


RECORD_NAME = re.compile(r"^[a-z_]+:[a-z_:0-9]+:[a-z0-9_]+$")
RECORDS = recording_rules()


@pytest.mark.parametrize("rule", RECORDS, ids=[r["record"] for r in RECORDS])
def test_recording_rule_shape(rule: dict[str, Any]) -> None:
    assert RECORD_NAME.match(rule["record"]), rule["record"]
    assert rule["record"].count(":") == 2
    raw = {name for name in metric_names(rule["expr"]) if ":" not in name or name.startswith("vllm:")}
    if raw:
        # Raw series carry instance and job; recorded ones must not, so offset 1d still matches.
        assert "without (instance, job" in rule["expr"] or " by (" in rule["expr"], rule["record"]


def test_recording_rules_are_unique() -> None:
    """One rule per record, or per record and labels: every SLO's error ratio is one record name."""
    keys = [(r["record"], tuple(sorted(r.get("labels", {}).items()))) for r in RECORDS]
    assert len(keys) == len(set(keys))


def test_rule_files_are_one_per_area() -> None:
    assert [p.name for p in rule_files()] == [
        "dependency.rules.yml", "engine.rules.yml", "gpu.rules.yml", "platform.rules.yml",
        "scheduling.rules.yml", "signals.rules.yml", "slo.rules.yml",
    ]


@pytest.mark.parametrize(("heading", "anchor"), [
    ("### GpuTemperatureHigh", "gputemperaturehigh"),
    ("## Scheduling layer", "scheduling-layer"),
    ("# Oximeter runbook", "oximeter-runbook"),
])
def test_github_anchor(heading: str, anchor: str) -> None:
    assert github_anchor(heading.lstrip("#")) == anchor
