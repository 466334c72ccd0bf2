"""A local stack's Prometheus loads alerting rules written with the limits its analyzer's
configuration sets, time-scaled as the stack runs."""

from __future__ import annotations

from pathlib import Path

from alert_rules import RULES_DIR, alerting_rules, rule_files
from analyzer.service.limits import configured_limits, limits
from stack.demo_stack import analyzer_addon
from stack.options import Endpoints
from stack.scrape_setup import rule_paths


def _alert(paths: list[Path], name: str) -> dict[str, object]:
    [rule] = [r for d in {p.parent for p in paths} for r in alerting_rules(d) if r["alert"] == name]
    return rule


def test_the_rules_are_written_with_the_given_limits_and_scaled(tmp_path: Path) -> None:
    shipped = {p: p.read_text(encoding="utf-8") for p in rule_files()}
    paths = rule_paths(tmp_path, 10.0, stock=False, limits={**limits(), "queue_wait_p99.threshold": 0.5,
                                                            "gpu_memory_full.threshold": 0.9})
    assert sorted(p.name for p in paths) == sorted(p.name for p in shipped)
    assert all(p.is_relative_to(tmp_path) for p in paths)
    wait = _alert(paths, "GatewayQueueWaitHigh")
    assert "p99_1m > 0.5 and" in " ".join(str(wait["expr"]).split())
    full = _alert(paths, "GpuMemoryFull")
    assert str(full["expr"]).endswith(">= 0.9") and full["for"] == "60s"  # 10m / 10
    # The shipped files are left as they are.
    assert {p: p.read_text(encoding="utf-8") for p in rule_files()} == shipped


def test_without_limits_the_shipped_rules_load(tmp_path: Path) -> None:
    assert rule_paths(tmp_path, 1.0, stock=False) == rule_files(RULES_DIR)


def test_the_analyzer_addon_carries_the_limits_of_the_configuration_it_writes(tmp_path: Path) -> None:
    token = tmp_path / "token"
    addon = analyzer_addon(tmp_path, "http://127.0.0.1:1/chat", token, scale=10.0)
    ep = Endpoints(simulator="http://127.0.0.1:2", engines={}, exporters={}, gateways={},
                   prometheus="http://127.0.0.1:3", alertmanager=None, redis=None, addons={})
    argv = addon.argv(ep, tmp_path / "port")
    config = Path(argv[argv.index("--config") + 1])
    assert addon.limits == configured_limits(config)
