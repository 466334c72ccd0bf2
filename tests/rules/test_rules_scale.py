"""Time-scaled rules for live tests: durations divided, thresholds untouched, still valid."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from alert_rules import rule_files
from alert_rules.scale import parse_duration, scale_expr, scale_groups, write_scaled_rules

PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"


@pytest.mark.parametrize(("text", "seconds"), [
    ("15s", 15), ("5m", 300), ("1h30m", 5400), ("1d", 86400), ("500ms", 0.5), ("1w", 604800),
])
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


def test_parse_duration_rejects_numbers() -> None:
    with pytest.raises(ValueError, match="not a Prometheus duration"):
        parse_duration("300")


@pytest.mark.parametrize(("expr", "factor", "scaled"), [
    ("rate(x[5m]) > 1", 10, "rate(x[30s]) > 1"),
    ("x offset 1d", 10, "x offset 8640s"),
    ("quantile_over_time(0.95, x[5m:1m])", 20, "quantile_over_time(0.95, x[15s:3s])"),
    ("max_over_time(x[1m:])", 60, "max_over_time(x[1s:])"),
    ("increase(x[1m]) > 100", 4, "increase(x[15s]) > 100"),
    ("rate(x[1m]) and time() - y < 300", 1000, "rate(x[60ms]) and time() - y < 300"),
    ('x{le="0.5"} > 1', 10, 'x{le="0.5"} > 1'),
])
def test_scale_expr(expr: str, factor: float, scaled: str) -> None:
    assert scale_expr(expr, factor) == scaled


def test_scale_groups_scales_for_and_keeps_the_original() -> None:
    groups: list[dict[str, Any]] = [{"name": "g", "interval": "1m", "rules": [
        {"alert": "A", "expr": "rate(x[5m]) > 1", "for": "10m", "labels": {"severity": "info"}}]}]
    scaled = scale_groups(groups, 10)
    assert scaled == [{"name": "g", "interval": "6s", "rules": [
        {"alert": "A", "expr": "rate(x[30s]) > 1", "for": "60s", "labels": {"severity": "info"}}]}]
    assert groups[0]["rules"][0]["for"] == "10m"
    with pytest.raises(ValueError, match="> 0"):
        scale_groups(groups, 0)


def test_a_start_up_grace_keeps_its_real_duration() -> None:
    # Processes start no faster on a compressed clock: the job-missing grace stays 5 minutes while
    # its expression's windows (none here) and every other alert's `for` are scaled.
    groups: list[dict[str, Any]] = [{"name": "g", "rules": [
        {"alert": "ScrapeJobMissing", "expr": 'absent(up{job="x"})', "for": "5m"},
        {"alert": "TargetDown", "expr": "up == 0", "for": "2m"}]}]
    assert [r["for"] for r in scale_groups(groups, 10)[0]["rules"]] == ["5m", "12s"]


def test_scaled_rule_files_pass_promtool(tmp_path: Path) -> None:
    written = write_scaled_rules(tmp_path, 20)
    assert [p.name for p in written] == [p.name for p in rule_files()]
    result = subprocess.run([PROMTOOL, "check", "rules", *map(str, written)], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    gpu = yaml.safe_load((tmp_path / "gpu.rules.yml").read_text())["groups"][0]["rules"]
    temperature = next(r for r in gpu if r.get("alert") == "GpuTemperatureHigh")
    assert temperature["for"] == "3s"
    assert temperature["expr"].endswith("> 85")
