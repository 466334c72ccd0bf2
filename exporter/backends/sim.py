"""Simulator backend: reads one node of ``oximeter sim serve``'s fleet over HTTP at scrape time.

Contract with the simulator: ``GET {sim_url}/fleet/gpus?node=NAME`` returns
``{"simulation": true, "node", "gpus": [...], "processes": [...]}``; any field may be null (not
available → series absent); HTTP 503 means the node's telemetry is lost, so no GPU series at all.
Only the stdlib is used, with a short timeout, so a hung simulator cannot hang the scrape.
"""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self

from exporter.backends.base import (
    CLOCK_EVENT_REASONS,
    NVLINK_ERROR_KINDS,
    GpuIdentity,
    GpuProcess,
    GpuReading,
    HostProcess,
    NodeSnapshot,
    NvLinkStat,
    XidStat,
)

if TYPE_CHECKING:
    from exporter.settings import ExporterSettings

log = logging.getLogger(__name__)


class BadPayloadError(ValueError):
    """A simulated GPU object does not follow the contract."""


def _num(obj: Mapping[str, Any], key: str) -> float | None:
    value = obj.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadPayloadError(f"{key}: expected a number, got {type(value).__name__}")
    return float(value)


def _int(obj: Mapping[str, Any], key: str) -> int | None:
    value = _num(obj, key)
    return None if value is None else int(value)


def _flag(obj: Mapping[str, Any], key: str) -> bool | None:
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, bool):
        raise BadPayloadError(f"{key}: expected a boolean, got {type(value).__name__}")
    return value


def _str(obj: Mapping[str, Any], key: str) -> str:
    value = obj.get(key)
    return "" if value is None else str(value)


def _xids(events: Any) -> tuple[XidStat, ...] | None:
    if events is None:
        return None
    if not isinstance(events, list):
        raise BadPayloadError("xid_events: expected a list")
    stats: dict[int, tuple[int, float]] = {}
    for event in events:
        xid = int(event["xid"])
        ts = float(event["timestamp_seconds"])
        count, last = stats.get(xid, (0, 0.0))
        stats[xid] = (count + 1, max(last, ts))
    return tuple(XidStat(xid, count, ts) for xid, (count, ts) in sorted(stats.items()))


def _processes(raw: Any) -> tuple[GpuProcess, ...] | None:
    if raw is None:
        return None
    if not isinstance(raw, list):
        raise BadPayloadError("processes: expected a list")
    found = []
    for proc in raw:
        used = _int(proc, "used_memory_bytes")
        if used is not None:
            found.append(GpuProcess(pid=int(proc["pid"]), name=_str(proc, "name"), used_memory_bytes=used))
    return tuple(found)


def _nvlinks(raw: Any) -> tuple[NvLinkStat, ...] | None:
    """``[{"link", "up", "errors": {kind: count}, "transmit_bytes", "receive_bytes"}]``; absent: None."""
    if raw is None:
        return None
    if not isinstance(raw, list):
        raise BadPayloadError("nvlinks: expected a list")
    links = []
    for obj in raw:
        if not isinstance(obj, Mapping):
            raise BadPayloadError("nvlinks: expected a list of objects")
        errors = obj.get("errors") or {}
        if not isinstance(errors, Mapping):
            raise BadPayloadError("nvlinks: errors: expected an object")
        links.append(NvLinkStat(
            link=int(obj["link"]), up=bool(obj["up"]),
            errors=tuple((kind, int(errors[kind])) for kind in NVLINK_ERROR_KINDS
                         if errors.get(kind) is not None),
            transmit_bytes=_int(obj, "transmit_bytes"), receive_bytes=_int(obj, "receive_bytes")))
    return tuple(links)


def parse_gpu(obj: Mapping[str, Any]) -> GpuReading:
    """One GPU object of the contract → a reading; BadPayloadError when it does not fit."""
    if not isinstance(obj, Mapping) or not isinstance(obj.get("index"), int):
        raise BadPayloadError("GPU object without an integer index")
    identity = GpuIdentity(index=int(obj["index"]), uuid=_str(obj, "uuid"), model=_str(obj, "name"),
                           pci_bus_id=_str(obj, "pci_bus_id"))
    try:
        xid = _xids(obj.get("xid_events"))
        if obj.get("lost"):
            return GpuReading(identity=identity, up=False, xid=xid)
        reasons = obj.get("clock_event_reasons")
        if reasons is not None and not isinstance(reasons, list):
            raise BadPayloadError("clock_event_reasons: expected a list")
        utilization = _num(obj, "utilization_ratio")
        return GpuReading(
            identity=identity,
            up=True,
            utilization_ratio=utilization,
            memory_used_bytes=_int(obj, "memory_used_bytes"),
            memory_total_bytes=_int(obj, "memory_total_bytes"),
            temperature_celsius=_num(obj, "temperature_celsius"),
            power_watts=_num(obj, "power_watts"),
            power_limit_watts=_num(obj, "power_limit_watts"),
            sm_clock_hertz=_num(obj, "sm_clock_hertz"),
            sm_clock_max_hertz=_num(obj, "sm_clock_max_hertz"),
            clock_event_reasons=None if reasons is None else frozenset(
                r for r in reasons if r in CLOCK_EVENT_REASONS),
            ecc_corrected_total=_int(obj, "ecc_corrected_total"),
            ecc_uncorrected_total=_int(obj, "ecc_uncorrected_total"),
            remapped_rows_correctable=_int(obj, "remapped_rows_correctable"),
            remapped_rows_uncorrectable=_int(obj, "remapped_rows_uncorrectable"),
            row_remap_pending=_flag(obj, "row_remap_pending"),
            row_remap_failure=_flag(obj, "row_remap_failure"),
            pcie_replay_total=_int(obj, "pcie_replay_total"),
            pcie_transmit_bytes_per_second=_num(obj, "pcie_transmit_bytes_per_second"),
            pcie_receive_bytes_per_second=_num(obj, "pcie_receive_bytes_per_second"),
            xid=xid,
            processes=_processes(obj.get("processes")),
            nvlinks=_nvlinks(obj.get("nvlinks")),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise BadPayloadError(f"GPU {identity.index}: {exc}") from None


class SimBackend:
    """One node of the simulated fleet, fetched once per scrape."""

    name = "sim"
    simulation = True

    def __init__(self, sim_url: str, node: str, *, timeout_s: float = 2.0) -> None:
        query = urllib.parse.urlencode({"node": node})
        self.url = f"{sim_url.rstrip('/')}/fleet/gpus?{query}"
        self.node = node
        self.timeout_s = timeout_s
        # No proxy: the simulator is on this host, and an http_proxy in the environment must not
        # send fleet telemetry elsewhere.
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    @classmethod
    def from_settings(cls, settings: ExporterSettings, node: str) -> Self:
        """``node`` of the simulator at ``sim_url``."""
        return cls(settings.sim_url, node, timeout_s=settings.sim_timeout_s)

    def start(self) -> None:
        """Nothing to acquire: an unreachable simulator is a counted error at scrape time."""

    def close(self) -> None:
        """Nothing to release."""

    def fetch(self) -> Any:
        """The raw JSON document (raises urllib/json errors)."""
        with self._opener.open(self.url, timeout=self.timeout_s) as response:
            return json.loads(response.read())

    def read(self) -> NodeSnapshot:
        """The node's GPUs; 503 → telemetry_lost, no GPU series; one bad GPU → the rest still."""
        try:
            document = self.fetch()
        except urllib.error.HTTPError as exc:
            exc.close()
            reason = "telemetry_lost" if exc.code == 503 else "sim_unreachable"
            return NodeSnapshot(gpus=(), errors=(reason,), read_ok=False)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:  # it answered, with garbage
            log.warning("simulator %s: not JSON: %s", self.url, exc)
            return NodeSnapshot(gpus=(), errors=("sim_bad_payload",), read_ok=False)
        except (OSError, ValueError) as exc:  # URLError and timeouts are OSErrors
            log.warning("simulator %s: %s", self.url, exc)
            return NodeSnapshot(gpus=(), errors=("sim_unreachable",), read_ok=False)
        if not isinstance(document, dict) or not isinstance(document.get("gpus"), list):
            return NodeSnapshot(gpus=(), errors=("sim_bad_payload",), read_ok=False)
        gpus: list[GpuReading] = []
        errors: list[str] = []
        for obj in document["gpus"]:
            try:
                reading = parse_gpu(obj)
            except (BadPayloadError, KeyError, TypeError, ValueError, AttributeError) as exc:
                log.warning("simulator %s: %s", self.url, exc)
                errors.append("sim_bad_payload")
                continue
            if not reading.up:
                errors.append("gpu_lost")
            gpus.append(reading)
        host = _host_processes(document.get("processes"), errors)
        total = parse_host_memory(document, errors)
        return NodeSnapshot(gpus=tuple(gpus), errors=tuple(errors), host_processes=host,
                            host_memory_total_bytes=total)


def parse_host_memory(document: dict[str, Any], errors: list[str]) -> int | None:
    """The document's ``host_memory_total_bytes`` (absent: None; not a positive integer: None
    and a ``sim_bad_payload`` error)."""
    total = document.get("host_memory_total_bytes")
    if total is not None and (isinstance(total, bool) or not isinstance(total, int) or total <= 0):
        errors.append("sim_bad_payload")
        return None
    return total


def _host_processes(raw: Any, errors: list[str]) -> tuple[HostProcess, ...]:
    found = []
    for proc in raw if isinstance(raw, list) else []:
        try:
            rss = proc.get("rss_bytes")
            if rss is not None:
                found.append(HostProcess(name=str(proc["name"]), rss_bytes=int(rss)))
        except (AttributeError, KeyError, TypeError, ValueError):
            errors.append("sim_bad_payload")
    return tuple(found)
