"""A stock fleet, live: no gateway (traffic straight to the engines), GPUs exported as dcgm-exporter
with its default counters, kube-state-metrics from the simulator, Prometheus with the adapter rules
and an analyzer on ``inputs: stock``. A thermal throttle on n1 GPU 1 opens the thermal incident on
that GPU, and the engine on n1 restarting shows in that incident as a change Kubernetes reported,
with nobody posting it. Every dashboard panel then has data, or reads only series a stock fleet
cannot have (``StockInputs.producible``, the one place that says so) and is checked to have none.

Its own small stack (2 nodes of 2 GPUs, no backfill, no Alertmanager or Redis): the shared stack
runs Oximeter's gateway and exporter, which a stock fleet has not. The thermal signal judges a
fixed limit, so no history is needed.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from e2e_helpers import THERMAL_S, incident, incidents
from shared_stack import (
    ANALYZER_STEP_S,
    PANEL_TIMING,
    PANEL_WARMUP_S,
    SCALE,
    live_options,
    live_timeout_s,
    open_deadline_s,
)

from analyzer.signals.stock_inputs import StockInputs
from dashboards.build import load_built
from dashboards.promql import panel_queries
from reporter.sink import ChatSink
from stack.demo_stack import analyzer_addon
from stack.local import Stack
from stack.procs import wait_until

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def stock_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    workspace = tmp_path_factory.mktemp("stock")
    token_file = workspace / "relay.token"
    token_file.write_text("stock-relay-token", encoding="utf-8")
    with ChatSink() as sink:
        addon = analyzer_addon(workspace, sink.url, token_file, scale=SCALE, step_s=ANALYZER_STEP_S,
                               interval_s=ANALYZER_STEP_S, inputs="stock")
        options = live_options(backfill=None, alertmanager=False, redis=False, telemetry="stock",
                               addons=(addon,))
        with Stack(workspace, options) as stack:
            yield stack


def _thermal_on(api: str, node: str, gpu: str) -> list[dict[str, Any]]:
    return [i for i in incidents(api) if i["layer"] == "infrastructure"
            and (i["root_cause"]["labels"].get("node"), i["root_cause"]["labels"].get("gpu")) == (node, gpu)]


def test_a_stock_fleet_scrapes_no_oximeter_producer(stock_stack: Stack) -> None:
    jobs = {r["metric"]["job"] for r in stock_stack.query("count by (job) (up)")}
    # The analyzer's own job joins once its port is known; Oximeter's gateway and exporter never.
    assert jobs - {"oximeter-analyzer"} == {"vllm", "dcgm-exporter", "kube-state-metrics"}
    assert stock_stack.query('count({__name__=~"oximeter_(gpu_ecc|queue_limit|requests_total).*"})') == []
    # The adapters translate dcgm-exporter's fields: every GPU has a temperature under our name.
    # Targets being up says each was scraped once, not that a rule evaluation has run since, so a
    # node's series may land an evaluation later: wait until as many as the fleet has GPUs appear.
    expected = [("n1", "0"), ("n1", "1"), ("n2", "0"), ("n2", "1")]

    def gpus_with_a_temperature() -> list[tuple[str, str]]:
        return sorted((t["metric"]["node"], t["metric"]["gpu"])
                      for t in stock_stack.query("oximeter_gpu_temperature_celsius"))

    wait_until(lambda: len(gpus_with_a_temperature()) >= len(expected), 60,
               interval_s=0.5, what="a temperature for every GPU")
    assert gpus_with_a_temperature() == expected


@pytest.mark.timeout(live_timeout_s(60, *[open_deadline_s("gpu_temperature")] * 2))
def test_thermal_incident_on_the_right_gpu_lists_the_engine_restart(stock_stack: Stack) -> None:
    assert stock_stack.endpoints is not None
    api = stock_stack.endpoints.addons["analyzer"]
    wait_until(lambda: stock_stack.query("oximeter_gpu_temperature_celsius"), 60,
               what="the adapters' GPU series")
    stock_stack.fault("thermal_throttle", "n1", gpu=1, strength=0.45, duration_s=THERMAL_S)
    stock_stack.fault("engine_restart", "n1")
    (opened,) = wait_until(lambda: _thermal_on(api, "n1", "1"), open_deadline_s("gpu_temperature"),
                           interval_s=1.0, what="an infrastructure incident on n1 GPU 1")
    assert opened["rule"] == "thermal_throttle", opened

    def restarts() -> list[dict[str, Any]]:
        changes = incident(api, opened["id"])["changes"]
        return [c for c in changes if c["source"] == "kubernetes" and "vllm-n1" in c["description"]]

    (restart,) = wait_until(restarts, open_deadline_s("gpu_temperature"), interval_s=1.0,
                            what="the engine restart among the incident's changes")
    assert restart["labels"].get("node") == "n1" and "restarted once" in restart["description"], restart


def test_every_panel_has_data_or_reads_only_what_a_stock_fleet_lacks(stock_stack: Stack) -> None:
    # After the thermal test: an incident exists, so the analyzer's panels have something to show.
    assert stock_stack.prometheus_started_s is not None
    inputs = StockInputs()
    empty, unavailable_with_data, lacking = [], [], []
    for file, dashboard in load_built().items():
        for query in panel_queries(dashboard, timing=PANEL_TIMING):
            where = f"{file} / {query.panel} / {query.ref_id}"
            if not inputs.producible(query.expr):
                lacking.append(where)
                if stock_stack.query(query.expr):
                    unavailable_with_data.append(where)
                continue
            timeout_s = max(5.0, stock_stack.prometheus_started_s + PANEL_WARMUP_S - time.time())
            try:
                wait_until(lambda q=query.expr: stock_stack.query(q), timeout_s, interval_s=0.5, what=where)
            except TimeoutError:
                empty.append(where)
    assert empty == [] and unavailable_with_data == []
    # The declaration can fail: gateway-only panels, for one, are declared and empty.
    assert any("Requests by code" in w for w in lacking)
    print(f"stock dashboards: {len(lacking)} panel queries read only what a stock fleet lacks")


def test_stack_files_say_stock(stock_stack: Stack) -> None:
    config = (Path(stock_stack.workspace) / "prometheus.yml").read_text(encoding="utf-8")
    assert "adapters" in config and "platform.rules.yml" not in config and "oximeter-gateway" not in config
