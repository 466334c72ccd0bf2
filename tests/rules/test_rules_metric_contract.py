"""Contract: every metric name read by the rules and dashboards is produced by someone.

The producers' list is alert_rules/metric_catalogue.yml (gateway, exporter, simulator, analyzer,
reporter, vLLM current and older names); recorded names are produced by the rules themselves.
"""

from __future__ import annotations

import re

import pytest

from alert_rules import ADAPTERS_DIR, RULES_DIR, all_rules, load_catalogue, recording_rules
from dashboards.build import load_built
from dashboards.promql import panel_queries, variable_queries
from oximeter.promql import metric_names

TYPES = {"counter", "gauge", "histogram"}
PRODUCERS = {"gateway", "exporter", "simulator", "analyzer", "reporter", "vllm", "prometheus"}
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


def produced_names() -> set[str]:
    """Every series name a producer exposes (histogram families expanded to their series)."""
    names = set()
    for metric in load_catalogue():
        names.add(metric["name"])
        if metric["type"] == "histogram":
            names.update(metric["name"] + suffix for suffix in HISTOGRAM_SUFFIXES)
    return names


def test_catalogue_is_well_formed() -> None:
    catalogue = load_catalogue()
    names = [m["name"] for m in catalogue]
    assert len(names) == len(set(names))
    for metric in catalogue:
        assert set(metric) <= {"name", "type", "producer", "labels", "deprecated"}, metric
        assert metric["type"] in TYPES, metric
        assert metric["producer"] in PRODUCERS, metric
        assert isinstance(metric["labels"], list), metric
        assert re.fullmatch(r"[a-zA-Z_:][a-zA-Z0-9_:]*", metric["name"]), metric
        if metric["type"] == "counter" and metric["producer"] != "vllm":
            assert metric["name"].endswith("_total"), metric


def test_rules_read_only_produced_or_recorded_names() -> None:
    # An adapter's records exist where its exporter is scraped (the Kubernetes platform alerts
    # read kube-state-metrics' records, and are quiet on a fleet without it).
    known = produced_names() | {r["record"] for d in (RULES_DIR, ADAPTERS_DIR) for r in recording_rules(d)}
    unknown = {(rule.get("alert") or rule.get("record"), name)
               for rule in all_rules() for name in metric_names(rule["expr"]) if name not in known}
    assert unknown == set()


def test_dashboards_read_only_produced_or_recorded_names() -> None:
    known = produced_names() | {r["record"] for r in recording_rules()}
    unknown = set()
    for file_name, dashboard in load_built().items():
        exprs = [q.expr for q in panel_queries(dashboard)] + list(variable_queries(dashboard).values())
        unknown |= {(file_name, name) for expr in exprs for name in metric_names(expr) if name not in known}
    assert unknown == set()


def test_vllm_fallbacks_use_the_older_names() -> None:
    exprs = " ".join(r["expr"] for r in recording_rules())
    for old in ("vllm:gpu_cache_usage_perc", "vllm:time_per_output_token_seconds_bucket"):
        assert f"or {old}" in exprs or f"or sum without (instance, job) (rate({old}" in exprs, old


@pytest.mark.parametrize(("expr", "names"), [
    ("up", {"up"}),
    ('sum by (service) (rate(oximeter_requests_total{code=~"5.."}[5m]))', {"oximeter_requests_total"}),
    ("max without (instance, job) (a) / max without (instance, job) (b)", {"a", "b"}),
    ('label_replace(vllm:kv_cache_usage_perc or vllm:gpu_cache_usage_perc, "model", "$1", "model_name", '
     '"(.*)")',
     {"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"}),
    ("x offset 1d > 1.5e3 and on (node) y < bool 0.3", {"x", "y"}),
    ("histogram_quantile(0.99, sum by (le) (rate(h_bucket[$__rate_interval])))", {"h_bucket"}),
    ("a / on (gpu_model) group_left () avg by (gpu_model) (b)", {"a", "b"}),
    ('label_values(oximeter_gpu_up{node=~"$node"}, gpu)', {"oximeter_gpu_up"}),
    ("label_values(node)", set()),
    ("vector(1)", set()),
])
def test_metric_names(expr: str, names: set[str]) -> None:
    assert metric_names(expr) == names
