"""Prometheus recording and alerting rules (``*.rules.yml``), their promtool tests and helpers.

The YAML files are what Prometheus loads; this package only lists and reads them (and renders
time-scaled copies for live tests, see ``alert_rules.scale``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

RULES_DIR = Path(__file__).resolve().parent
TESTS_DIR = RULES_DIR / "tests"
CATALOGUE_PATH = RULES_DIR / "metric_catalogue.yml"
# Recording rules that translate stock exporters' series (dcgm-exporter, vLLM, kube-state-metrics)
# onto the names above; loaded only where those exporters are the telemetry (see docs/stock-telemetry.md).
ADAPTERS_DIR = RULES_DIR / "adapters"


def rule_files(rules_dir: Path = RULES_DIR) -> list[Path]:
    """Every ``*.rules.yml`` file, sorted by name."""
    return sorted(rules_dir.glob("*.rules.yml"))


def load_groups(path: Path) -> list[dict[str, Any]]:
    """The rule groups of one file."""
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    groups: list[dict[str, Any]] = data.get("groups", [])
    return groups


def all_rules(rules_dir: Path = RULES_DIR) -> list[dict[str, Any]]:
    """Every rule (recording and alerting) of every file, in file and group order."""
    return [rule for path in rule_files(rules_dir) for group in load_groups(path) for rule in group["rules"]]


def alerting_rules(rules_dir: Path = RULES_DIR) -> list[dict[str, Any]]:
    """Every alerting rule."""
    return [rule for rule in all_rules(rules_dir) if "alert" in rule]


def recording_rules(rules_dir: Path = RULES_DIR) -> list[dict[str, Any]]:
    """Every recording rule."""
    return [rule for rule in all_rules(rules_dir) if "record" in rule]


def load_catalogue(path: Path = CATALOGUE_PATH) -> list[dict[str, Any]]:
    """The metric catalogue: one dict per produced metric (name, type, producer, labels)."""
    metrics: list[dict[str, Any]] = yaml.safe_load(path.read_text(encoding="utf-8"))["metrics"]
    return metrics
