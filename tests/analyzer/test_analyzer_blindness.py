"""Prometheus answering 200 with empty results where the fleet should have series: a telemetry
problem told once, naming the query and the nodes, while the source itself reads as up."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs

import pytest

from analyzer.diagnosis.topology import Topology
from analyzer.incidents.lifecycle import Change, Incident, IncidentSettings
from analyzer.incidents.store import IncidentStore
from analyzer.service.daemon import Analyzer
from analyzer.service.pipeline import CyclePipeline
from analyzer.signals.catalogue import CATALOGUE
from analyzer.signals.sources.prometheus import PrometheusSource
from oximeter.store import connect


class EmptyPrometheus:
    """Prometheus's HTTP API (api/v1/query_range, api/v1/rules) answering every query with status
    success and an empty matrix, except the metric names in ``present``: one series on node n1,
    sampled every 15 s for the 5 minutes up to ``now``."""

    def __init__(self) -> None:
        self.present: set[str] = set()
        self.now = datetime.now(UTC).replace(microsecond=0)
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self, query: str) -> None:
                if self.path.startswith("/api/v1/rules"):
                    body: dict[str, Any] = {"status": "success", "data": {"groups": []}}
                else:
                    now = fake.now.timestamp()
                    result = [{"metric": {"node": "n1", "gpu": "0", "service": "chat", "model": "m"},
                               "values": [[now - 15 * i, "1"] for i in range(20, -1, -1)]}
                              for name in fake.present if name in query][:1]
                    body = {"status": "success", "data": {"resultType": "matrix", "result": result}}
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                self._answer(self.path)

            def do_POST(self) -> None:
                form = self.rfile.read(int(self.headers.get("Content-Length", "0"))).decode()
                self._answer(" ".join(parse_qs(form).get("query", [""])))

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"


class Notices:
    def __init__(self) -> None:
        self.notices: list[tuple[str, str]] = []

    def notify(self, change: Change, incident: Incident | None) -> None:
        pass

    def notice(self, key: str, text: str) -> None:
        self.notices.append((key, text))


@pytest.fixture
def prometheus() -> Iterator[EmptyPrometheus]:
    fake = EmptyPrometheus()
    yield fake
    fake.server.shutdown()
    fake.server.server_close()


def _analyzer(prometheus: EmptyPrometheus, told: Notices,
              signals: tuple[str, ...] = ("queue_length", "gpu_temperature", "queue_wait_p99")) -> Analyzer:
    source = PrometheusSource(prometheus.url, retries=0)
    catalogue = {name: CATALOGUE[name] for name in signals}
    pipeline = CyclePipeline(source, catalogue, 15.0, 600.0)
    store = IncidentStore(connect(":memory:"))
    return Analyzer(pipeline, store, IncidentSettings(), Topology(), told, clock=lambda: prometheus.now,
                    catalogue=catalogue)


def test_a_gateway_whose_queue_query_answers_nothing_is_told_once(prometheus: EmptyPrometheus) -> None:
    prometheus.present = {"oximeter_target_info", "oximeter_gpu_temperature_celsius"}
    told = Notices()
    analyzer = _analyzer(prometheus, told)
    assert analyzer.cycle() and analyzer.cycle()
    assert analyzer.metrics.source_up._value.get() == 1  # the source answers...
    assert analyzer.metrics.blind._value.get() == 1  # ...with nothing where the gateway is
    assert len(told.notices) == 1  # once per outage, not every cycle
    text = told.notices[0][1]
    assert "platform/telemetry problem" in text
    assert ("queue_length: `max without (instance, job) (max_over_time(oximeter_queue_length[1m]))` (nor "
            "its recording rule service_node:oximeter_queue_length:max_1m) returns no series (expected on "
            "node(s) n1)") in text
    # queue_wait_p99 is not expected before any traffic; gpu_temperature has its series.
    assert "queue_wait_p99" not in text and "gpu_temperature" not in text


def test_series_that_vanish_from_every_node_are_told_and_their_return_noted(
        prometheus: EmptyPrometheus) -> None:
    prometheus.present = {"oximeter_gpu_temperature_celsius"}
    told = Notices()
    analyzer = _analyzer(prometheus, told)
    assert analyzer.cycle()
    assert told.notices == [] and analyzer.metrics.blind._value.get() == 0
    prometheus.present = set()  # the exporter's scrape job was dropped
    prometheus.now += timedelta(minutes=2)
    assert analyzer.cycle()
    assert told.notices == []  # its last samples are still fresher than Prometheus's staleness
    prometheus.now += timedelta(minutes=4)
    assert analyzer.cycle()
    assert len(told.notices) == 1
    text = told.notices[0][1]
    assert "gpu_temperature: `max without (instance, job) (oximeter_gpu_temperature_celsius)`" in text
    assert "returns no series (expected on node(s) n1)" in text
    prometheus.present = {"oximeter_gpu_temperature_celsius"}
    prometheus.now += timedelta(minutes=1)
    assert analyzer.cycle()
    assert analyzer.metrics.blind._value.get() == 0 and len(told.notices) == 1


@pytest.mark.parametrize("gpus", [False, True])
def test_a_node_serving_without_gpu_telemetry_is_said_once_by_the_next_incident(
        prometheus: EmptyPrometheus, gpus: bool) -> None:
    # A CPU host: its gateway serves (target_info), no GPU series ever; no notice of its own.
    prometheus.present = {"oximeter_target_info", "oximeter_queue_length",
                          *(["oximeter_gpu_up"] if gpus else [])}
    told = Notices()
    analyzer = _analyzer(prometheus, told, ("queue_length", "gpu_down"))
    assert analyzer.cycle() and analyzer.cycle()
    said = [line for line in analyzer.tracker.not_judged if "no GPU telemetry" in line]
    assert said == ([] if gpus else ["GPU signals on n1: no GPU telemetry from these nodes (a host without "
                                     "GPUs, or no GPU exporter), so temperature, clocks, ECC, Xid and GPU "
                                     "memory are not judged"])
    assert told.notices == []
