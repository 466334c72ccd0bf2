"""The custom collector: reads the backend, the host and the external queues at scrape time.

client_python's custom-collector pattern: ``describe()`` lists the families without touching the
GPU (so registration is free), ``collect()`` yields fresh families each scrape. Every failure is
counted in ``oximeter_exporter_collect_errors_total{reason}`` and the scrape still answers.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Protocol, TypeVar

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

from exporter.backends.base import (
    CLOCK_EVENT_REASONS,
    NVLINK_ERROR_KINDS,
    GpuBackend,
    GpuReading,
    HostProcess,
    NodeSnapshot,
)
from exporter.dcgm import dcgm_families
from exporter.error_counter import ErrorCounter
from oximeter.dcgm_fields import DCGM_DEFAULT_FIELDS
from oximeter.xids import PAGING_XIDS

log = logging.getLogger(__name__)

GPU_LABELS = ("node", "gpu", "uuid", "gpu_model", "pci_bus_id")
T = TypeVar("T")


class HostSource(Protocol):
    """Resident memory of inference processes on this host, and the host's memory."""

    def read(self) -> tuple[tuple[HostProcess, ...], list[str]]:
        """(processes, error reasons)."""

    def memory_total_bytes(self) -> int:
        """Physical memory installed."""


class QueueSource(Protocol):
    """External queue lengths."""

    def read(self) -> tuple[dict[str, int], list[str]]:
        """(length by queue name, error reasons)."""


# Plain per-GPU gauges: (metric name, help, reading -> value or None).
_GPU_GAUGES: tuple[tuple[str, str, Callable[[GpuReading], float | None]], ...] = (
    ("oximeter_gpu_utilization_ratio", "Fraction of the last sample period a kernel ran (0-1).",
     lambda r: r.utilization_ratio),
    ("oximeter_gpu_memory_used_bytes", "GPU memory in use.", lambda r: r.memory_used_bytes),
    ("oximeter_gpu_memory_total_bytes", "GPU memory installed.", lambda r: r.memory_total_bytes),
    ("oximeter_gpu_temperature_celsius", "GPU core temperature.", lambda r: r.temperature_celsius),
    ("oximeter_gpu_power_watts", "Power draw.", lambda r: r.power_watts),
    ("oximeter_gpu_power_limit_watts", "Enforced power limit.", lambda r: r.power_limit_watts),
    ("oximeter_gpu_sm_clock_hertz", "Current SM clock.", lambda r: r.sm_clock_hertz),
    ("oximeter_gpu_sm_clock_max_hertz", "Maximum SM clock.", lambda r: r.sm_clock_max_hertz),
    ("oximeter_gpu_row_remap_pending", "1 while a row remap waits for a GPU reset.",
     lambda r: None if r.row_remap_pending is None else float(r.row_remap_pending)),
    ("oximeter_gpu_row_remap_failure", "1 when a row remap failed (no spare rows left).",
     lambda r: None if r.row_remap_failure is None else float(r.row_remap_failure)),
)


def _gauge(name: str, help_text: str, labels: Sequence[str]) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, help_text, labels=labels)


def _counter(name: str, help_text: str, labels: Sequence[str]) -> CounterMetricFamily:
    return CounterMetricFamily(name, help_text, labels=labels)


_tuple_new = tuple.__new__


def new_sample(name: str, labels: dict[str, str], value: float) -> Sample:
    """``Sample(name, labels, value)``, built in C: ``Sample(...)`` and ``Sample._make`` run Python
    code, and a history builds hundreds of samples per node and step."""
    return _tuple_new(Sample, (name, labels, value, None, None, None))


def _put(family: GaugeMetricFamily | CounterMetricFamily, labels: dict[str, str], value: float) -> None:
    """``family.add_metric`` with the labels already a dict (in the family's label order), so one
    GPU's labels are built once per scrape rather than once per sample."""
    name = family.name + "_total" if family.type == "counter" else family.name
    family.samples.append(new_sample(name, labels, value))


class GpuCollector(Collector):
    """Exports one node: GPUs from ``backend``, host processes, external queues, and itself."""

    def __init__(self, backend: GpuBackend, node: str, *, host: HostSource | None = None,
                 queues: QueueSource | None = None, naming: str = "oximeter",
                 errors: ErrorCounter | None = None) -> None:
        self.backend = backend
        self.node = node
        self.host = host
        self.queues = queues
        self.naming = naming
        self.errors = errors or ErrorCounter()
        # Scrapes run on server threads; one read at a time keeps NVML and Redis calls bounded
        # (each read has its own deadline, so a waiting scrape is never blocked for long).
        self._lock = threading.Lock()

    def describe(self) -> Iterable[Metric]:
        """Every family this collector can yield, empty: registration never reads a GPU."""
        return list(self._families(NodeSnapshot(gpus=()), (), {}, 0.0, describe=True))

    def collect(self) -> Iterator[Metric]:
        """Read everything now and yield the families."""
        with self._lock:
            families = list(self._read_and_build())
        yield from families

    def _read_and_build(self) -> Iterator[Metric]:
        started = time.perf_counter()
        errors: list[str] = []
        snapshot = self._guarded(self.backend.read, "backend", errors, NodeSnapshot(gpus=(), read_ok=False))
        errors.extend(snapshot.errors)
        host_processes: Sequence[HostProcess] = snapshot.host_processes or ()
        if snapshot.host_processes is None and self.host is not None:
            no_host: tuple[tuple[HostProcess, ...], list[str]] = ((), [])
            host_processes, host_errors = self._guarded(self.host.read, "process", errors, no_host)
            errors.extend(host_errors)
        host_total = snapshot.host_memory_total_bytes
        if host_total is None and self.host is not None:
            host_total = self._guarded(self.host.memory_total_bytes, "process", errors, None)
        lengths: dict[str, int] = {}
        if self.queues is not None:
            no_queues: tuple[dict[str, int], list[str]] = ({}, [])
            lengths, queue_errors = self._guarded(self.queues.read, "redis", errors, no_queues)
            errors.extend(queue_errors)
        self.errors.add(errors)
        yield from self._families(snapshot, host_processes, lengths, time.perf_counter() - started,
                                  host_total=host_total)

    @staticmethod
    def _guarded(read: Callable[[], T], reason: str, errors: list[str], fallback: T) -> T:
        try:
            return read()
        except Exception:  # a source bug must not turn the whole scrape into a 500
            log.exception("reading %s failed", reason)
            errors.append(reason)
            return fallback

    def _families(self, snapshot: NodeSnapshot, host_processes: Sequence[HostProcess],
                  lengths: dict[str, int], duration_s: float, describe: bool = False,
                  host_total: int | None = None) -> Iterator[Metric]:
        node = self.node
        gpus = snapshot.gpus
        if self.naming == "dcgm-exporter":
            # Standing in for dcgm-exporter: its default fields and nothing of Oximeter's own.
            yield from dcgm_families(node, gpus, DCGM_DEFAULT_FIELDS, stand_in=True)
            return
        telemetry = _gauge("oximeter_telemetry_up",
                           "1 when this scrape read the node's GPU telemetry, 0 when the source (NVML or "
                           "the simulator) could not be read or reported no GPU.", ("node",))
        if not describe and snapshot.gpu_source:
            telemetry.add_metric([node], 1 if snapshot.read_ok and gpus else 0)
        yield telemetry
        yield from self._gpu_families(gpus)
        rss = _gauge("oximeter_process_resident_memory_bytes",
                     "Resident memory (RSS) of a configured inference process.", ("node", "process"))
        totals: dict[str, int] = {}
        for proc in host_processes:
            totals[proc.name] = totals.get(proc.name, 0) + proc.rss_bytes
        for name, value in sorted(totals.items()):
            rss.add_metric([node, name], value)
        yield rss
        memory = _gauge("oximeter_host_memory_total_bytes",
                        "Physical memory of the host, the limit process RSS grows towards.", ("node",))
        if host_total is not None:
            memory.add_metric([node], host_total)
        yield memory
        queue = _gauge("oximeter_external_queue_length", "Items waiting in an external queue.",
                       ("node", "queue"))
        for name, value in sorted(lengths.items()):
            queue.add_metric([node, name], value)
        yield queue
        if self.backend.simulation:
            info = _gauge("oximeter_simulation_info", "1: these GPUs are simulated.", ("node",))
            if not describe:
                info.add_metric([node], 1)
            yield info
        duration = _gauge("oximeter_exporter_collect_duration_seconds",
                          "Time this scrape spent reading GPUs, host and queues.", ("node",))
        errors = _counter("oximeter_exporter_collect_errors_total",
                          "Failures while collecting, by reason; the scrape carried on.", ("node", "reason"))
        if not describe:
            duration.add_metric([node], duration_s)
            for reason, count in sorted(self.errors.snapshot().items()):
                errors.add_metric([node, reason], count)
        yield duration
        yield errors
        if self.naming == "dcgm":
            yield from dcgm_families(node, gpus)

    @staticmethod
    def _nvlink_families(live: Sequence[tuple[GpuReading, dict[str, str]]]) -> Iterator[Metric]:
        """Per NVLink: up, error counters by kind, and the bytes it sent and received (node
        exporter's transmit/receive naming), so one degraded link shows as itself."""
        link_labels = (*GPU_LABELS, "link")
        up = _gauge("oximeter_gpu_nvlink_up", "1 while the NVLink is active, 0 when it is down.", link_labels)
        errors = _counter("oximeter_gpu_nvlink_errors_total",
                          "NVLink data-link errors (CRC flit/data, replay, recovery) since driver load.",
                          (*link_labels, "kind"))
        sent = _counter("oximeter_gpu_nvlink_transmit_bytes_total", "Data sent over the NVLink.", link_labels)
        received = _counter("oximeter_gpu_nvlink_receive_bytes_total", "Data received over the NVLink.",
                            link_labels)
        for r, own in live:
            for link in r.nvlinks or ():
                base = {**own, "link": str(link.link)}
                _put(up, base, 1 if link.up else 0)
                counts = dict(link.errors)
                for kind in NVLINK_ERROR_KINDS:
                    if kind in counts:
                        _put(errors, {**base, "kind": kind}, counts[kind])
                if link.transmit_bytes is not None:
                    _put(sent, base, link.transmit_bytes)
                if link.receive_bytes is not None:
                    _put(received, base, link.receive_bytes)
        yield from (up, errors, sent, received)

    def _gpu_families(self, gpus: Sequence[GpuReading]) -> Iterator[Metric]:
        node = self.node
        # Each GPU's labels are built once per scrape and shared by its samples of every family
        # (the history scrapes every GPU of a fleet at every step); a sample's labels are only read.
        owns = [dict(zip(GPU_LABELS, (node, str(r.identity.index), r.identity.uuid, r.identity.model,
                                      r.identity.pci_bus_id), strict=True)) for r in gpus]
        up = _gauge("oximeter_gpu_up", "1 when the GPU answered this scrape, 0 when lost or late.",
                    GPU_LABELS)
        for r, own in zip(gpus, owns, strict=True):
            _put(up, own, 1 if r.up else 0)
        yield up
        live = [(r, own) for r, own in zip(gpus, owns, strict=True) if r.up]
        for name, help_text, value_of in _GPU_GAUGES:
            family = _gauge(name, help_text, GPU_LABELS)
            family.samples = [new_sample(family.name, own, value)
                              for r, own in live if (value := value_of(r)) is not None]
            yield family
        reasons = _gauge("oximeter_gpu_clock_event_active",
                         "1 while a clock event reason (throttle) is active.", (*GPU_LABELS, "reason"))
        ecc = _counter("oximeter_gpu_ecc_errors_total", "Volatile ECC errors since the driver loaded.",
                       (*GPU_LABELS, "kind"))
        rows = _gauge("oximeter_gpu_remapped_rows", "Rows remapped to spares.", (*GPU_LABELS, "kind"))
        replays = _counter("oximeter_gpu_pcie_replay_total", "PCIe replays (link retries).", GPU_LABELS)
        pcie = _gauge("oximeter_gpu_pcie_throughput_bytes_per_second",
                      "PCIe data rate, by direction (receive: host to GPU), as the driver samples it.",
                      (*GPU_LABELS, "direction"))
        procs = _gauge("oximeter_gpu_process_memory_used_bytes", "GPU memory held by a compute process.",
                       (*GPU_LABELS, "pid", "process"))
        for r, own in live:
            if r.clock_event_reasons is not None:
                for reason in CLOCK_EVENT_REASONS:
                    _put(reasons, {**own, "reason": reason}, 1 if reason in r.clock_event_reasons else 0)
            for kind, count in (("corrected", r.ecc_corrected_total),
                                ("uncorrected", r.ecc_uncorrected_total)):
                if count is not None:
                    _put(ecc, {**own, "kind": kind}, count)
            for kind, count in (("correctable", r.remapped_rows_correctable),
                                ("uncorrectable", r.remapped_rows_uncorrectable)):
                if count is not None:
                    _put(rows, {**own, "kind": kind}, count)
            if r.pcie_replay_total is not None:
                _put(replays, own, r.pcie_replay_total)
            for direction, rate in (("transmit", r.pcie_transmit_bytes_per_second),
                                    ("receive", r.pcie_receive_bytes_per_second)):
                if rate is not None:
                    _put(pcie, {**own, "direction": direction}, rate)
            by_pid: dict[int, tuple[str, int]] = {}
            for proc in r.processes or ():
                # One process can appear once per MIG instance: one series per pid, summed.
                name, used = by_pid.get(proc.pid, (proc.name, 0))
                by_pid[proc.pid] = (name, used + proc.used_memory_bytes)
            for pid, (name, used) in sorted(by_pid.items()):
                _put(procs, {**own, "pid": str(pid), "process": name}, used)
        yield from (reasons, ecc, rows, replays, pcie, procs)
        yield from self._nvlink_families(live)
        # Xid counters survive a lost GPU: Xid 79 ("fallen off the bus") is what explains it.
        xid_count = _counter("oximeter_gpu_xid_errors", "Xid critical errors, by code.", (*GPU_LABELS, "xid"))
        xid_last = _gauge("oximeter_gpu_xid_last_timestamp_seconds",
                          "When an Xid code was last seen (Unix time; 0 = never).", (*GPU_LABELS, "xid"))
        for r, own in zip(gpus, owns, strict=True):
            if r.xid is None:
                continue
            stats = {s.xid: s for s in r.xid}
            for code in sorted(set(PAGING_XIDS) | set(stats)):
                stat = stats.get(code)
                labels = {**own, "xid": str(code)}
                _put(xid_count, labels, stat.count if stat else 0)
                _put(xid_last, labels, stat.last_timestamp_seconds if stat else 0)
        yield xid_count
        yield xid_last
