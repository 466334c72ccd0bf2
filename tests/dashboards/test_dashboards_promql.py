"""Panel queries expanded as Grafana does, then parsed by promtool and run on a real Prometheus;
annotation queries expanded the same way and sent to a real analyzer API."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import requests
import yaml
from api_server import ApiServer

from alert_rules import all_rules
from alert_rules.scale import write_scaled_rules
from analyzer.detection.events import AnomalyEvent
from analyzer.diagnosis.topology import Topology, TopologySettings
from analyzer.incidents.lifecycle import IncidentSettings, IncidentTracker, findings
from analyzer.incidents.store import IncidentStore
from analyzer.service.api import build_app
from dashboards.build import load_built
from dashboards.promql import (
    ALL,
    RenderedQuery,
    Timing,
    Variable,
    annotation_queries,
    duration,
    expand,
    format_value,
    panel_queries,
)
from oximeter.store import connect
from stack.ports import start_reserved
from stack.procs import ManagedProcess, http_ok

PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
MULTI = Variable("service", multi=True, include_all=True, all_value=".*")
MULTI_NO_ALL_VALUE = Variable("service", multi=True, include_all=True, all_value=None)
SINGLE = Variable("node", multi=False, include_all=False, all_value=None)


@pytest.mark.parametrize(("variable", "selected", "all_values", "text"), [
    (MULTI, [ALL], [], ".*"),
    (MULTI, ["chat"], [], "chat"),
    (MULTI, ["chat", "embed"], [], "(chat|embed)"),
    (MULTI, ["a.b"], [], "a\\\\.b"),
    (MULTI, ["x|y", "(z)"], [], "(x\\\\|y|\\\\(z\\\\))"),
    (MULTI_NO_ALL_VALUE, [ALL], ["n1", "n2"], "(n1|n2)"),
    (SINGLE, ["n1"], [], "n1"),
    (SINGLE, ["it's"], [], "it\\\\'s"),
])
def test_format_value_like_grafana(variable: Variable, selected: list[str], all_values: list[str],
                                   text: str) -> None:
    assert format_value(variable, selected, all_values) == text


@pytest.mark.parametrize(("timing", "rate_interval"), [
    (Timing(scrape_interval_s=15, interval_s=15), "60s"),  # 4 x scrape interval
    (Timing(scrape_interval_s=15, interval_s=120), "135s"),  # interval + scrape interval
    (Timing(scrape_interval_s=1, interval_s=2), "4s"),
    (Timing(scrape_interval_s=0.5, interval_s=0.5), "2s"),
])
def test_rate_interval_like_grafana(timing: Timing, rate_interval: str) -> None:
    assert duration(timing.rate_interval_s) == rate_interval


@pytest.mark.parametrize(("expr", "text"), [
    ('rate(x{service=~"$service"}[$__rate_interval])', 'rate(x{service=~"(a|b)"}[60s])'),
    ('x{node=~"${node}"}[$__range]', 'x{node=~"n1"}[3600s]'),
    ('x{node=~"[[node]]"}[$__interval]', 'x{node=~"n1"}[15s]'),
    ('x{node=~"${node:regex}"}', 'x{node=~"n1"}'),
    ('label_replace(x, "m", "$1", "n", "(.*)")', 'label_replace(x, "m", "$1", "n", "(.*)")'),
    ('x{gpu=~"$gpu"}', 'x{gpu=~"$gpu"}'),  # unknown variables stay (and then fail to parse)
])
def test_expand(expr: str, text: str) -> None:
    assert expand(expr, {"service": "(a|b)", "node": "n1"}) == text


def _all_queries() -> list[RenderedQuery]:
    """Every panel query with All selected, and with one value chosen for every variable."""
    queries = []
    for dashboard in load_built().values():
        queries += panel_queries(dashboard)
        queries += panel_queries(dashboard, {"service": ["chat"], "node": ["n1", "n2"], "gpu": ["0"]},
                                 Timing(scrape_interval_s=1, interval_s=2, range_s=600))
    return queries


def test_every_rendered_query_parses(tmp_path: Path) -> None:
    """promtool parses each query as a recording rule's expression (no variable is left over)."""
    queries = _all_queries()
    assert all("$" not in q.expr.replace('"$1"', "") for q in queries)
    rules = {"groups": [{"name": "dashboards", "rules": [
        {"record": f"dashboard_check:query_{i}:parse", "expr": q.expr} for i, q in enumerate(queries)]}]}
    path = tmp_path / "dashboards.rules.yml"
    path.write_text(yaml.safe_dump(rules))
    result = subprocess.run([PROMTOOL, "check", "rules", str(path)], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_rejects_a_broken_query(tmp_path: Path) -> None:
    """The parse check can fail: an unexpanded variable is a parse error."""
    path = tmp_path / "bad.rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "g", "rules": [
        {"record": "a:b:c", "expr": 'rate(x{gpu=~"$gpu"}[$__rate_interval])'}]}]}))
    result = subprocess.run([PROMTOOL, "check", "rules", str(path)], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 1


@pytest.fixture
def prometheus(tmp_path: Path, start_process: Callable[..., ManagedProcess]) -> str:
    """A real Prometheus on a reserved port with an empty TSDB and the rules time-scaled by 20."""
    rules = write_scaled_rules(tmp_path / "rules", 20)
    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump({
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(p) for p in rules],
    }))
    _, port = start_reserved(lambda port: start_process("prometheus", [
        PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
        f"--web.listen-address=127.0.0.1:{port}",
    ]), lambda port: http_ok(f"http://127.0.0.1:{port}/-/ready"), timeout_s=30)
    return f"http://127.0.0.1:{port}"


def test_every_query_runs_on_a_real_prometheus(prometheus: str) -> None:
    """Each query is accepted by Prometheus's query API (no parse or evaluation error)."""
    errors = []
    with requests.Session() as session:
        for query in _all_queries():
            reply = session.get(f"{prometheus}/api/v1/query", params={"query": query.expr}, timeout=10).json()
            if reply["status"] != "success":
                errors.append((query.dashboard, query.panel, reply.get("error")))
        reply = session.get(f"{prometheus}/api/v1/query", params={"query": "rate(x[$__rate_interval])"},
                            timeout=10).json()
    assert errors == []
    assert reply["status"] == "error" and reply["errorType"] == "bad_data"


def test_prometheus_loads_every_scaled_rule(prometheus: str) -> None:
    groups = requests.get(f"{prometheus}/api/v1/rules", timeout=10).json()["data"]["groups"]
    rules = [r for g in groups for r in g["rules"]]
    assert len(rules) == len(all_rules()) > 50
    assert {r["health"] for r in rules} <= {"ok", "unknown"}


# -- annotations: the analyzer's incidents through the Infinity datasource ------------------------------
T0 = datetime(2026, 3, 2, 10, 0, tzinfo=UTC)
INFINITY = {"type": "yesoreyeram-infinity-datasource", "uid": "${analyzer}"}


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


@pytest.fixture(scope="module")
def analyzer_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    """The analyzer API over a store holding one open incident that began at T0."""
    store = IncidentStore(connect(tmp_path_factory.mktemp("annotations") / "oximeter.db"))
    event = AnomalyEvent(signal="nvlink_errors_increase", layer="infrastructure",
                         labels=AnomalyEvent.labels_from({"node": "n1", "gpu": "1", "link": "2"}),
                         onset=T0, detected_at=T0 + timedelta(minutes=1), cleared_at=None, value=3165.0,
                         baseline=0.0, score=3165.0, reason="test")
    settings = IncidentSettings()
    topology = Topology.from_settings(TopologySettings(services={"chat": ["n1"]}))
    now = T0 + timedelta(minutes=2)
    found = findings([event], topology, now=now, settings=settings)
    changes, touched = IncidentTracker(settings).step(found, now)
    store.save(touched, changes)
    server = ApiServer(build_app(store, None, clock=lambda: now))
    yield server
    server.stop()


@pytest.mark.parametrize("name", sorted(load_built()))
def test_every_dashboard_annotates_the_analyzers_incidents(analyzer_api: ApiServer, name: str) -> None:
    """The annotation query, expanded as Grafana does, gets the incident from a real analyzer API with
    every column it declares, typed as declared: the columns Grafana draws annotations from."""
    dashboard = load_built()[name]
    start, end = _ms(T0 - timedelta(hours=1)), _ms(T0 + timedelta(hours=1))
    [query] = annotation_queries(dashboard, start, end)
    assert query.datasource == INFINITY
    assert "$" not in query.path + "".join(v for _, v in query.params)
    assert {column for _, column, _ in query.columns} == {"time", "timeEnd", "title", "text", "tags"}
    reply = requests.get(analyzer_api.url(query.path), params=dict(query.params), timeout=10)
    assert reply.status_code == 200, reply.text
    [row] = reply.json()
    for selector, column, kind in query.columns:
        value = row[selector]
        if kind == "timestamp_epoch":  # epoch milliseconds
            assert isinstance(value, int) and start <= value <= end, (column, value)
        else:
            assert kind == "string" and isinstance(value, str) and value, (column, value)
    tags = {column: row[selector] for selector, column, _ in query.columns}["tags"]
    # Infinity reads tags as one comma-separated string, which Grafana splits into the tags.
    assert tags.split(",") == ["infrastructure", "nvlink_degraded", "warning", "open", "chat", "n1"]
    assert (row["time"], row["timeEnd"]) == (_ms(T0), _ms(T0 + timedelta(minutes=2)))
    # A time range that ends before the incident began has nothing to draw.
    [earlier] = annotation_queries(dashboard, start - 3_600_000, start)
    assert requests.get(analyzer_api.url(earlier.path), params=dict(earlier.params), timeout=10).json() == []
