"""A shard's label matchers: added to every selector of a query, parsed, and applied to labels the
way PromQL applies them (a real Prometheus runs the rewritten queries in
tests/analyzer/test_analyzer_prometheus_source.py)."""

from __future__ import annotations

import pytest

from analyzer.signals.catalogue import CATALOGUE
from oximeter.promql import labels_match, metric_names, parse_matchers, with_matchers

M = 'cluster="a"'


@pytest.mark.parametrize(("expr", "expected"), [
    ("up", 'up{cluster="a"}'),
    ('up{job!="x"}', 'up{cluster="a",job!="x"}'),
    ("sum by (node) (rate(x_total[5m] offset 1d))",
     'sum by (node) (rate(x_total{cluster="a"}[5m] offset 1d))'),
    ("sum without (gpu) (x) / on (node) group_left (model) y",
     'sum without (gpu) (x{cluster="a"}) / on (node) group_left (model) y{cluster="a"}'),
    ('label_replace(x, "dst", "$1", "src", "(.*)")',
     'label_replace(x{cluster="a"}, "dst", "$1", "src", "(.*)")'),
    ("time() - x > bool 3 unless y", 'time() - x{cluster="a"} > bool 3 unless y{cluster="a"}'),
    ('{__name__="x"}', '{cluster="a",__name__="x"}'),
    ("level:metric:op", 'level:metric:op{cluster="a"}'),
    ("max_over_time(x[10m:1m])", 'max_over_time(x{cluster="a"}[10m:1m])'),
])
def test_matchers_go_into_every_selector(expr: str, expected: str) -> None:
    assert with_matchers(expr, M) == expected
    assert with_matchers(expr, "") == expr


JOIN = " * on (namespace, pod) group_left (node) max by (namespace, pod, node) (kube_pod_info)"


@pytest.mark.parametrize(("expr", "matchers", "expected"), [
    # Joined to its node through kube_pod_info, a pod's series takes every matcher but the node's.
    ("sum by (namespace, pod) (kube_pod_container_status_restarts_total)" + JOIN, 'node="n1",cluster="a"',
     'sum by (namespace, pod) (kube_pod_container_status_restarts_total{cluster="a"})'
     + JOIN.replace("(kube_pod_info)", '(kube_pod_info{node="n1",cluster="a"})')),
    ('container_memory_working_set_bytes{container!=""}' + JOIN, 'node=~"n[12]"',
     'container_memory_working_set_bytes{container!=""}'
     + JOIN.replace("(kube_pod_info)", '(kube_pod_info{node=~"n[12]"})')),
    # Not joined: the matcher goes on it, and reads its missing node as "" as PromQL does.
    ('kube_pod_status_ready{condition="true"}', 'node="n1"',
     'kube_pod_status_ready{node="n1",condition="true"}'),
    ('kube_pod_info', 'node="n1"', 'kube_pod_info{node="n1"}'),
    ("up" + JOIN, 'a="x\\"y"',
     'up{a="x\\"y"}' + JOIN.replace("(kube_pod_info)", '(kube_pod_info{a="x\\"y"})')),
])
def test_a_node_matcher_reaches_a_pods_series_through_kube_pod_info(expr: str, matchers: str,
                                                                     expected: str) -> None:
    assert with_matchers(expr, matchers) == expected


@pytest.mark.parametrize("name", sorted(CATALOGUE))
def test_every_catalogue_query_keeps_its_metrics_and_gains_one_matcher_per_selector(name: str) -> None:
    promql = CATALOGUE[name].promql
    rewritten = with_matchers(promql, M)
    assert metric_names(rewritten) == metric_names(promql)
    selectors = rewritten.count("{" + M)
    assert selectors >= max(1, len(metric_names(promql))) and rewritten.count(M) == selectors


@pytest.mark.parametrize(("text", "labels", "selected"), [
    ('cluster="a"', {"cluster": "a"}, True),
    ('cluster="a"', {}, False),
    ('cluster!="a"', {}, True),
    ('node=~"n[12]", gpu="0"', {"node": "n2", "gpu": "0"}, True),
    ('node=~"n[12]"', {"node": "n12"}, False),  # anchored, as PromQL's
    ('node!~"n1"', {"node": "n10"}, True),
    ('a="x\\"y"', {"a": 'x"y'}, True),
])
def test_matchers_select_as_promql_does(text: str, labels: dict[str, str], selected: bool) -> None:
    assert labels_match(labels, parse_matchers(text)) is selected


@pytest.mark.parametrize("text", ["node=n1", 'node=~"("', 'node="n1" gpu="0"', '"n1"', 'node=="n1"'])
def test_what_is_not_a_matcher_list_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_matchers(text)
