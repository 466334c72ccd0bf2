"""Generated dashboards: committed JSON is current, current panel types only, variables consistent."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from analyzer.service.limits import limits
from dashboards.build import BUILD_DIR, build_all, load_built, sources
from dashboards.promql import panel_queries, variable_queries
from stack.procs import oximeter_argv

ALLOWED_PANELS = {"timeseries", "stat", "table", "bargauge", "heatmap", "row"}
DASHBOARDS = load_built()
EXPECTED = {
    "overview.json": ("Oximeter / Overview", {"service", "node"}),
    "scheduling.json": ("Oximeter / Scheduling", {"service", "node"}),
    "gpu_fleet.json": ("Oximeter / GPU fleet", {"node", "gpu"}),
    "vllm_engine.json": ("Oximeter / vLLM engine", {"node"}),
    "dependencies.json": ("Oximeter / Dependencies", {"service", "node"}),
}


def _panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for panel in dashboard["panels"]:
        out.append(panel)
        out.extend(panel.get("panels", []))
    return out


def test_committed_json_is_current() -> None:
    """Fails when a source changed without `oximeter dashboards build`."""
    rendered = build_all(limits())
    committed = {p: p.read_text(encoding="utf-8") for p in BUILD_DIR.glob("*.json")}
    stale = sorted(p.name for p in rendered if committed.get(p) != rendered[p])
    orphans = sorted(p.name for p in committed if p not in rendered)
    assert (stale, orphans) == ([], []), "run `oximeter dashboards build` and commit dashboards/build/"


def test_cli_build_writes_the_same_files(tmp_path: Path) -> None:
    result = subprocess.run(oximeter_argv("dashboards", "build", "--out", str(tmp_path)), capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(DASHBOARDS)
    for path in tmp_path.iterdir():
        assert path.read_text(encoding="utf-8") == (BUILD_DIR / path.name).read_text(encoding="utf-8")


def test_five_dashboards_from_five_sources() -> None:
    assert len(sources()) == 5
    assert {name: d["title"] for name, d in DASHBOARDS.items()} == {k: v[0] for k, v in EXPECTED.items()}
    uids = [d["uid"] for d in DASHBOARDS.values()]
    assert len(set(uids)) == len(uids)


def test_json_has_sorted_keys() -> None:
    for name, data in DASHBOARDS.items():
        expected = json.dumps(data, sort_keys=True, indent=2, ensure_ascii=False) + "\n"
        assert (BUILD_DIR / name).read_text() == expected


@pytest.mark.parametrize("name", sorted(DASHBOARDS))
def test_current_panel_types_only(name: str) -> None:
    types = {p["type"] for p in _panels(DASHBOARDS[name])}
    assert types <= ALLOWED_PANELS, types - ALLOWED_PANELS


@pytest.mark.parametrize("name", sorted(DASHBOARDS))
def test_variables_are_defined_and_used(name: str) -> None:
    dashboard = DASHBOARDS[name]
    templating = dashboard["templating"]["list"]
    # The metrics' Prometheus, then the analyzer's incidents (annotations) through Infinity.
    assert [(t["name"], t["query"]) for t in templating if t["type"] == "datasource"] == \
        [("datasource", "prometheus"), ("analyzer", "yesoreyeram-infinity-datasource")]
    label_variables = [t for t in templating if t["type"] != "datasource"]
    labels = {t["name"] for t in label_variables}
    assert labels == EXPECTED[name][1]
    for item in label_variables:
        assert (item["multi"], item["includeAll"], item["allValue"]) == (True, True, ".*")
    text = " ".join(t["expr"] for p in _panels(dashboard) for t in p.get("targets", []))
    text += " ".join(variable_queries(dashboard).values())
    used = set(re.findall(r"\$(\w+)", text)) - {"__rate_interval", "__range", "__interval", "1"}
    assert used == labels


@pytest.mark.parametrize("name", sorted(DASHBOARDS))
def test_panels_use_the_datasource_variable_and_never_hide_missing_data(name: str) -> None:
    for panel in _panels(DASHBOARDS[name]):
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert "vector(0)" not in target["expr"], panel["title"]


def test_panels_do_not_overlap() -> None:
    for name, dashboard in DASHBOARDS.items():
        cells: set[tuple[int, int]] = set()
        for panel in _panels(dashboard):
            pos = panel["gridPos"]
            assert pos["x"] + pos["w"] <= 24, (name, panel["title"])
            area = {(x, y) for x in range(pos["x"], pos["x"] + pos["w"])
                    for y in range(pos["y"], pos["y"] + pos["h"])}
            assert not cells & area, (name, panel["title"])
            cells |= area


def test_every_panel_query_is_collected() -> None:
    targets = sum(len(p.get("targets", [])) for d in DASHBOARDS.values() for p in _panels(d))
    assert sum(len(panel_queries(d)) for d in DASHBOARDS.values()) == targets > 50
