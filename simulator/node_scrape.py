"""What one node of a history run presents to Prometheus: the exporter's GPU backend over the
in-process fleet, and each step's scrape written with the labels Prometheus would add (``job``,
``instance``, ``node``) and each target's ``up``."""

from __future__ import annotations

from prometheus_client.core import GaugeMetricFamily, Metric

from exporter.backends.base import HostProcess, NodeSnapshot
from exporter.backends.sim import BadPayloadError, parse_gpu, parse_host_memory
from simulator.fault_kinds import Effect
from simulator.fleet import Fleet
from simulator.series import SeriesStore

JOBS = {"vllm": 8000, "oximeter-gateway": 9000, "oximeter-exporter": 9400, "dcgm-exporter": 9400,
        "kube-state-metrics": 8080, "kubelet": 10250}
# Jobs whose series name their node themselves (dcgm-exporter's Hostname, kube-state-metrics'
# node label, fleet-wide for the deployment), so the scrape adds no node label.
_CLUSTER_JOBS = {"dcgm-exporter", "kube-state-metrics"}
# Exporter self-timing is wall-clock noise, not part of the model.
SKIP_FAMILIES = {"oximeter_exporter_collect_duration_seconds"}


class FleetBackend:
    """The exporter's GPU backend protocol over the in-process fleet (no HTTP in history)."""

    name = "sim"
    simulation = True

    def __init__(self, fleet: Fleet, node: str, wall_origin_s: float) -> None:
        self.fleet, self.node, self.wall_origin_s = fleet, node, wall_origin_s
        self.now = 0.0

    def start(self) -> None:
        """Nothing to acquire."""

    def close(self) -> None:
        """Nothing to release."""

    def read(self) -> NodeSnapshot:
        """Same contract and parser as the HTTP sim backend."""
        if self.fleet.faults.strongest(self.now, self.node, effect=Effect.TELEMETRY_LOST) is not None:
            return NodeSnapshot(gpus=(), errors=("telemetry_lost",), read_ok=False)
        doc = self.fleet.gpus_json(self.node, self.now, self.wall_origin_s)
        gpus, errors = [], []
        for obj in doc["gpus"]:
            try:
                reading = parse_gpu(obj)
            except BadPayloadError:
                errors.append("sim_bad_payload")
                continue
            if not reading.up:
                errors.append("gpu_lost")
            gpus.append(reading)
        host = tuple(HostProcess(name=p["name"], rss_bytes=p["rss_bytes"]) for p in doc["processes"])
        total = parse_host_memory(doc, errors)
        return NodeSnapshot(gpus=tuple(gpus), errors=tuple(errors), host_processes=host,
                            host_memory_total_bytes=total)


def record_scrape(store: SeriesStore, step: int, node: str, jobs: dict[str, list[Metric]],
                  engine_up: bool) -> None:
    """Store one step's scrape of ``node``: each job's families with its target labels and ``up``."""
    for job, families in jobs.items():
        host = job if job == "kube-state-metrics" else node  # one kube-state-metrics per cluster
        labels = {"job": job, "instance": f"{host}:{JOBS[job]}"}
        if job not in _CLUSTER_JOBS:
            labels["node"] = node
        store.add(step, [*families, _up(labels, job != "vllm" or engine_up)], labels)


def _up(labels: dict[str, str], up: bool) -> Metric:
    fam = GaugeMetricFamily("up", "1 if the target was scraped.", labels=list(labels))
    fam.add_metric(list(labels.values()), 1 if up else 0)
    return fam
