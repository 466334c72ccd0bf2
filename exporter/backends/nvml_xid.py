"""Xid critical errors from NVML's event API, for the NVML backend.

A background thread blocked in ``nvmlEventSetWait`` counts each Xid per GPU and code; the backend
reads the counts at scrape time. The pynvml module comes from the backend, which alone imports it.
"""

from __future__ import annotations

import ctypes
import logging
import threading
import time
from collections.abc import Iterable
from typing import Any

from exporter.backends.base import XidStat

log = logging.getLogger(__name__)


def _handle_key(handle: Any) -> int:
    """A key equal for two handles of the same device (ctypes pointers compare by identity)."""
    try:
        return int(ctypes.cast(handle, ctypes.c_void_p).value or 0)
    except (TypeError, ctypes.ArgumentError):
        return id(handle)


class XidListener:
    """Counts Xid critical errors per GPU and code, from the first event on."""

    def __init__(self, poll_ms: int) -> None:
        self._poll_ms = poll_ms
        self._nvml: Any = None
        # Written by the listener thread.
        self._lock = threading.Lock()
        self._xid: dict[int, dict[int, tuple[int, float]]] = {}
        self._index_by_key: dict[int, int] = {}
        self._pending_errors: list[str] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._event_set: Any = None

    def start(self, nvml: Any, handles: Iterable[tuple[int, Any]]) -> None:
        """Register every GPU (index, handle) that supports Xid events and start listening."""
        self._nvml = nvml
        xid_type = int(nvml.nvmlEventTypeXidCriticalError)
        try:
            self._event_set = nvml.nvmlEventSetCreate()
        except nvml.NVMLError as exc:
            log.warning("no Xid events (nvmlEventSetCreate: %s); Xid series absent", exc)
            return
        for index, handle in handles:
            if handle is None:
                continue
            try:
                if not int(nvml.nvmlDeviceGetSupportedEventTypes(handle)) & xid_type:
                    continue
                nvml.nvmlDeviceRegisterEvents(handle, xid_type, self._event_set)
            except nvml.NVMLError as exc:
                # Unsupported here: this GPU's Xid series stay absent rather than a false 0.
                log.warning("GPU %d: no Xid events (%s)", index, exc)
                continue
            self._xid[index] = {}
            self._index_by_key[_handle_key(handle)] = index
        if self._xid:
            self._thread = threading.Thread(target=self._listen, name="oximeter-xid", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stop the thread, then free the event set (not while the thread may still wait on it)."""
        self._stop.set()
        stuck = False
        if self._thread is not None:
            self._thread.join(timeout=self._poll_ms / 1000 * 2 + 1)
            stuck = self._thread.is_alive()
            self._thread = None
        nvml = self._nvml
        if self._event_set is not None and not stuck:
            try:
                nvml.nvmlEventSetFree(self._event_set)
            except nvml.NVMLError as exc:
                log.warning("nvmlEventSetFree failed: %s", exc)
            self._event_set = None

    def _listen(self) -> None:
        nvml = self._nvml
        xid_type = int(nvml.nvmlEventTypeXidCriticalError)
        while not self._stop.is_set():
            try:
                data = nvml.nvmlEventSetWait(self._event_set, self._poll_ms)
            except nvml.NVMLError_Timeout:
                continue
            except nvml.NVMLError as exc:
                log.warning("nvmlEventSetWait failed: %s", exc)
                with self._lock:
                    self._pending_errors.append("xid_listener")
                self._stop.wait(1.0)  # back off instead of spinning on a broken event set
                continue
            if not int(data.eventType) & xid_type:
                continue
            index = self._index_by_key.get(_handle_key(data.device))
            if index is None:
                log.warning("Xid %d on an unknown device", int(data.eventData))
                continue
            self.record(index, int(data.eventData), time.time())

    def record(self, index: int, xid: int, timestamp_seconds: float) -> None:
        """Count one Xid on GPU ``index``."""
        with self._lock:
            codes = self._xid.setdefault(index, {})
            count, _ = codes.get(xid, (0, 0.0))
            codes[xid] = (count + 1, timestamp_seconds)

    def stats(self, index: int) -> tuple[XidStat, ...] | None:
        """GPU ``index``'s counts by code (None when it has no Xid events)."""
        with self._lock:
            codes = self._xid.get(index)
            if codes is None:
                return None
            return tuple(XidStat(xid, count, ts) for xid, (count, ts) in sorted(codes.items()))

    def take_errors(self) -> list[str]:
        """The listener's errors since the last call."""
        with self._lock:
            errors, self._pending_errors = self._pending_errors, []
        return errors
