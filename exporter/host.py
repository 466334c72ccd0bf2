"""Resident memory of the configured inference processes on this host (RSS, not VIRT: a leak shows in RSS).

A configured name matches a process whose name equals it or whose command line contains it
(vLLM usually runs as ``python -m vllm...``); matches are summed per configured name, so the
``process`` label stays bounded by the configuration. No match → no series, never a 0.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import psutil

from exporter.backends.base import HostProcess


class ProcessMemory:
    """Reads RSS per configured process name with psutil."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = tuple(names)
        self._own_pid = os.getpid()

    def read(self) -> tuple[tuple[HostProcess, ...], list[str]]:
        """(processes found, error reasons)."""
        if not self.names:
            return (), []
        totals: dict[str, int] = {}
        try:
            for proc in psutil.process_iter(["name", "cmdline", "memory_info"]):
                if proc.pid == self._own_pid:
                    continue
                info = proc.info
                memory = info.get("memory_info")
                if memory is None:  # access denied: psutil puts None there
                    continue
                name = info.get("name") or ""
                cmdline = " ".join(info.get("cmdline") or ())
                for wanted in self.names:
                    if name == wanted or wanted in cmdline:
                        totals[wanted] = totals.get(wanted, 0) + int(memory.rss)
                        break
        except psutil.Error:
            return (), ["process"]
        return tuple(HostProcess(name, rss) for name, rss in sorted(totals.items())), []
