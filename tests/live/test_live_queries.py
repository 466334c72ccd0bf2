"""Issue 4, must show 3: every panel query and every recording rule returns live series.

Queries are expanded as Grafana sends them (``dashboards/promql.py``) with the datasource's scrape
interval (the stack's) and a 30 s range, first with one concrete value per variable (resolved from the
variable's own query against the live Prometheus), then with All. A concrete value proves that the
series carry the label the variable filters on; the result's labels must agree with the selection.
"""

from __future__ import annotations

import re
import time
from typing import Any

import pytest
from shared_stack import PANEL_TIMING, PANEL_WARMUP_S

from alert_rules import recording_rules
from dashboards.build import load_built
from dashboards.promql import panel_queries, variable_queries
from stack.local import Stack
from stack.procs import wait_until

DASHBOARDS = load_built()
_LABEL_VALUES = re.compile(r"^label_values\((.*),\s*(\w+)\)$", re.S)
EXPECTED_VALUES = {"node": ["n1", "n2"], "gpu": ["0", "1"], "service": ["chat"]}


def _series(stack: Stack, expr: str) -> list[dict[str, Any]]:
    """The query's result, polled while the stack warms up (windows filling after start)."""
    assert stack.prometheus_started_s is not None
    timeout_s = max(5.0, stack.prometheus_started_s + PANEL_WARMUP_S - time.time())
    try:
        result = wait_until(lambda: stack.query(expr), timeout_s, interval_s=0.5, what=expr)
    except TimeoutError:
        return []
    return result  # type: ignore[return-value]


def _variable_values(stack: Stack, dashboard: dict[str, Any]) -> dict[str, list[str]]:
    """Each query variable's values from the live Prometheus, earlier variables set to their first value."""
    chosen: dict[str, list[str]] = {}
    for name, query in variable_queries(dashboard).items():
        match = _LABEL_VALUES.match(query.strip())
        assert match, f"unsupported variable query {query!r}"
        selector = match.group(1)
        for prior, values in chosen.items():
            selector = selector.replace(f"${prior}", values[0])
        result = _series(stack, f"group by ({match.group(2)}) ({selector})")
        chosen[name] = sorted(r["metric"][match.group(2)] for r in result)
    return chosen


def _cases() -> list[Any]:
    cases = []
    for file, dashboard in DASHBOARDS.items():
        for i, q in enumerate(panel_queries(dashboard, timing=PANEL_TIMING)):
            cases.append(pytest.param(file, i, id=f"{file.removesuffix('.json')}/{q.panel}/{q.ref_id}"))
    return cases


@pytest.mark.parametrize("file", sorted(DASHBOARDS))
def test_variables_list_the_fleet(live_only: Stack, file: str) -> None:
    values = _variable_values(live_only, DASHBOARDS[file])
    assert values == {name: EXPECTED_VALUES[name] for name in values}


@pytest.mark.parametrize(("file", "index"), _cases())
def test_panel_query_returns_live_series(live_only: Stack, file: str, index: int) -> None:
    dashboard = DASHBOARDS[file]
    query = panel_queries(dashboard, timing=PANEL_TIMING)[index]
    values = _variable_values(live_only, dashboard)
    selection = {name: vals[:1] for name, vals in values.items()}
    concrete = panel_queries(dashboard, selection, PANEL_TIMING)[index]
    assert (concrete.panel, concrete.ref_id) == (query.panel, query.ref_id)
    for expr in (concrete.expr, query.expr):
        result = _series(live_only, expr)
        assert result, f"no series for {expr}"
        for series in result if expr is concrete.expr else []:
            for name, chosen in selection.items():
                assert series["metric"].get(name, chosen[0]) == chosen[0], (name, series["metric"])


def _expected_labels(record: str) -> set[str]:
    """``level:metric:operation``: the level names the labels the series keep (``node_gpu``...)."""
    return set(record.split(":")[0].split("_"))


@pytest.mark.parametrize("record", sorted({r["record"] for r in recording_rules()}))
def test_recording_rule_has_live_series(live_only: Stack, record: str) -> None:
    # Only samples of the last 5 s: the live Prometheus's own evaluations, not the backfill.
    result = _series(live_only, f"last_over_time({record}[5s])")
    assert result, f"{record} has no live series"
    for series in result:
        labels = series["metric"]
        missing = {name for name in _expected_labels(record) if not labels.get(name)}
        assert not missing, (record, labels)
        if "node" in labels:
            assert labels["node"] in EXPECTED_VALUES["node"]
