"""Every runbook link an incident or an alert carries leads to an existing section of
docs/runbook.md, and resolves under the configured base URL when one is set."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest
from pydantic import ValidationError

from alert_rules import alerting_rules
from analyzer.diagnosis.rules import RULE_IDS
from oximeter.runbook import RUNBOOK_PATH, runbook_link, runbook_ref
from reporter.settings import ReporterSettings

ROOT = Path(__file__).resolve().parents[1]
RUNBOOK = ROOT / RUNBOOK_PATH


def github_anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives a document's headings (repeats get -1, -2, ...)."""
    seen: Counter[str] = Counter()
    anchors = set()
    in_code = False
    for line in markdown.splitlines():
        if line.startswith("```"):
            in_code = not in_code
        if in_code or not re.match(r"#{1,6} ", line):
            continue
        slug = re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
        anchors.add(f"{slug}-{seen[slug]}" if seen[slug] else slug)
        seen[slug] += 1
    return anchors


def follow(link: str) -> None:
    """Assert ``link`` (``path#anchor``, relative to the repository root) names an existing section."""
    path, _, anchor = link.partition("#")
    target = ROOT / path
    assert target.is_file(), f"{link}: no file {path}"
    assert anchor in github_anchors(target.read_text(encoding="utf-8")), f"{link}: no such section"


def test_anchors_follow_github() -> None:
    text = "# A b\n## GpuDown\n### thermal_throttle\n## A b\n```\n# not a heading\n```\n## 504 (ratio)\n"
    assert github_anchors(text) == {"a-b", "gpudown", "thermal_throttle", "a-b-1", "504-ratio"}


@pytest.mark.parametrize("rule", RULE_IDS)
def test_every_diagnosis_rule_has_a_section(rule: str) -> None:
    follow(runbook_ref(rule))


def test_the_not_judged_section_exists() -> None:
    from reporter.render import NOT_JUDGED

    follow(runbook_ref(NOT_JUDGED))


@pytest.mark.parametrize("alert", alerting_rules(), ids=lambda r: r["alert"])
def test_every_alert_links_its_section(alert: dict[str, object]) -> None:
    annotations = alert["annotations"]
    assert isinstance(annotations, dict)
    follow(annotations["runbook_url"])


def test_links_inside_the_runbook_resolve() -> None:
    text = RUNBOOK.read_text(encoding="utf-8")
    links = re.findall(r"\]\(#([^)]+)\)", text)
    assert links
    missing = sorted(set(links) - github_anchors(text))
    assert not missing


def test_configured_base_url_makes_links_absolute() -> None:
    base = "https://git.example.com/oximeter/blob/main/docs/runbook.md"
    assert runbook_link(runbook_ref("kv_pressure"), base) == f"{base}#kv_pressure"
    assert runbook_link(runbook_ref("kv_pressure"), None) == "docs/runbook.md#kv_pressure"
    assert runbook_link("https://elsewhere.example/x#y", base) == "https://elsewhere.example/x#y"
    assert ReporterSettings(runbook_url=base).runbook_url == base
    with pytest.raises(ValidationError):
        ReporterSettings(runbook_url="docs/runbook.md#x")
