"""`promtool check rules` and `promtool test rules` on alert_rules/, and test coverage of every alert."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from alert_rules import TESTS_DIR, alerting_rules, rule_files

PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
TEST_FILES = sorted(TESTS_DIR.glob("*.test.yml"))


def _promtool(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PROMTOOL, *map(str, args)], capture_output=True, text=True, timeout=120, cwd=cwd)


def test_promtool_check_rules() -> None:
    result = _promtool("check", "rules", *rule_files())
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("SUCCESS") == len(rule_files())


@pytest.mark.parametrize("test_file", TEST_FILES, ids=[p.name for p in TEST_FILES])
def test_promtool_unit_tests(test_file: Path) -> None:
    result = _promtool("test", "rules", test_file.name, cwd=test_file.parent)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_rule_file_has_a_test_file() -> None:
    tested = {f for path in TEST_FILES for f in yaml.safe_load(path.read_text())["rule_files"]}
    assert {f"../{p.name}" for p in rule_files()} <= tested


def _alert_cases() -> dict[str, dict[str, int]]:
    """alertname -> {"firing": n, "quiet": n} over every alert_rule_test in the test files."""
    cases: dict[str, dict[str, int]] = {}
    for path in TEST_FILES:
        for test in yaml.safe_load(path.read_text())["tests"]:
            case: dict[str, Any]
            for case in test.get("alert_rule_test", []):
                kind = "firing" if case.get("exp_alerts") else "quiet"
                counts = cases.setdefault(case["alertname"], {"firing": 0, "quiet": 0})
                counts[kind] += 1
    return cases


def test_every_alert_has_a_firing_and_a_quiet_case() -> None:
    cases = _alert_cases()
    missing = [rule["alert"] for rule in alerting_rules()
               if rule["alert"] not in cases
               or (rule["alert"] != "Watchdog" and not (cases[rule["alert"]]["firing"]
                                                        and cases[rule["alert"]]["quiet"]))]
    assert missing == []
    assert cases["Watchdog"]["firing"] >= 1  # always firing: no quiet case can exist


def test_a_broken_expectation_fails(tmp_path: Path) -> None:
    """The unit tests can fail: the same rules with the temperature threshold moved do not pass."""
    for path in rule_files():
        text = path.read_text()
        if path.name == "gpu.rules.yml":
            assert "oximeter_gpu_temperature_celsius) > 85" in text
            text = text.replace("oximeter_gpu_temperature_celsius) > 85",
                                "oximeter_gpu_temperature_celsius) > 95")
        (tmp_path / path.name).write_text(text)
    tests = tmp_path / "tests"
    tests.mkdir()
    shutil.copy(TESTS_DIR / "gpu.test.yml", tests / "gpu.test.yml")
    result = _promtool("test", "rules", "gpu.test.yml", cwd=tests)
    assert result.returncode == 1
    assert "alertname: GpuTemperatureHigh, time: 2m" in result.stdout + result.stderr
