"""A blind analyzer is a telemetry problem: signals whose queries answer with no series at all where
the fleet should have some.

Prometheus answers a wrong selector, a dropped scrape job or a relabelling mistake with HTTP 200
and an empty result, so the source reads as up while every detector on those signals sees a
healthy nothing. A signal is expected to have series when it had some earlier in this process
(its series vanished from every entity), or, for the gateway's queue, on every node that
``oximeter_target_info`` says runs a gateway (the gateway itself is scraped, so its target is up).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np
import pandas as pd
from loguru import logger

from analyzer.signals.frame import SeriesFrame
from analyzer.signals.spec import SignalSpec

# Series every running gateway exports from its first scrape (a gauge, not a counter that waits
# for traffic): where target_info names a gateway's node and this is empty, the selector is wrong.
GATEWAY_SENTINEL = "queue_length"
TARGET_INFO = "target_info"
# A GPU gauge every GPU exporter reports from its first scrape: a node that target_info names and
# that never had one in this process has no GPU telemetry at all (a CPU host, or no GPU exporter).
GPU_SENTINEL = "gpu_down"
# Prometheus's own staleness: a series scraped less recently than this is gone from instant queries.
RECENT_S = 300.0
# Kinds whose series carry a number whenever they exist; a latency quantile or a ratio is NaN
# without traffic, so for those only "no series at all" counts.
ALWAYS_VALUED = ("gauge", "counter_growth")


@dataclass(frozen=True)
class Blind:
    """One signal that should have series and has none."""

    signal: str
    query: str
    record: str | None  # its recording rule, read instead where the store has it
    expected: tuple[str, ...]  # the nodes that had (or should have) its series

    def text(self) -> str:
        """A line for chat and the log."""
        nodes = ", ".join(self.expected[:10]) + (" …" if len(self.expected) > 10 else "")
        rule = f" (nor its recording rule {self.record})" if self.record else ""
        return f"{self.signal}: `{self.query}`{rule} returns no series (expected on node(s) {nodes or '?'})"


def has_series(frame: SeriesFrame | None, spec: SignalSpec) -> bool:
    """Whether the signal's query answers with series now: any column at all, and for the kinds
    that always carry a value, a finite one in the last ``RECENT_S`` (the source's live window keeps
    vanished columns, empty, for as long as it spans)."""
    if frame is None or frame.values.columns.empty:
        return False
    if spec.kind not in ALWAYS_VALUED or frame.values.index.empty:
        return True
    recent = frame.values[frame.values.index >= frame.values.index[-1] - pd.Timedelta(seconds=RECENT_S)]
    return bool(np.isfinite(recent.to_numpy(dtype=float)).any())


def _nodes(frame: SeriesFrame | None) -> set[str]:
    if frame is None:
        return set()
    return {node for c in frame.values.columns if (node := frame.labels_of(str(c)).get("node"))}


@dataclass
class BlindWatch:
    """Remembers which signals had series, and which are blind now (each reported once per outage)."""

    seen: dict[str, set[str]] = field(default_factory=dict)  # signal -> nodes it had series on
    blind: dict[str, Blind] = field(default_factory=dict)
    without_gpus: set[str] = field(default_factory=set)  # nodes already said to have no GPU telemetry

    def gpu_absent(self, frames: Mapping[str, SeriesFrame], catalogue: Mapping[str, SignalSpec]) -> list[str]:
        """Nodes newly found serving (target_info names them) with no GPU series ever seen in this
        process: their GPU signals are not judged, which is said once per node (a GPU that vanished
        later is a blind signal or a lost GPU instead). Nothing without the GPU gauge's signal."""
        if GPU_SENTINEL not in catalogue:
            return []
        gpus = self.seen.get(GPU_SENTINEL, set()) | _nodes(frames.get(GPU_SENTINEL))
        new = sorted(_nodes(frames.get(TARGET_INFO)) - gpus - self.without_gpus)
        self.without_gpus.update(new)
        return new

    def check(self, frames: Mapping[str, SeriesFrame],
              catalogue: Mapping[str, SignalSpec]) -> tuple[list[Blind], list[str]]:
        """(signals blind since this cycle, signals whose series came back)."""
        gateways = _nodes(frames.get(TARGET_INFO))
        now_blind: dict[str, Blind] = {}
        for name, spec in catalogue.items():
            frame = frames.get(name)
            if has_series(frame, spec):
                self.seen.setdefault(name, set()).update(_nodes(frame))
                continue
            expected = set(self.seen.get(name, ()))
            if name == GATEWAY_SENTINEL:
                expected |= gateways
            if name in self.seen or expected:
                now_blind[name] = Blind(name, spec.promql, spec.record, tuple(sorted(expected)))
        new = [b for name, b in now_blind.items() if name not in self.blind]
        back = sorted(name for name in self.blind if name not in now_blind)
        self.blind = now_blind
        return new, back

    def report(self, now: datetime, frames: Mapping[str, SeriesFrame], catalogue: Mapping[str, SignalSpec],
               notice: Callable[[str, str], None]) -> int:
        """:meth:`check`, then one ``notice`` for the newly blind and a log line for the recovered;
        returns how many are blind now."""
        new, back = self.check(frames, catalogue)
        if new:
            logger.error("analyzer: blind to {} signal(s): {}", len(new), "; ".join(b.text() for b in new))
            notice(f"analyzer:blind:{now:%Y%m%dT%H%M%S}", notice_text(new))
        if back:
            logger.info("analyzer: series back for {}", ", ".join(back))
        return len(self.blind)


def notice_text(blind: list[Blind]) -> str:
    """The one notice for signals found blind in a cycle."""
    return (f"platform/telemetry problem: the analyzer is blind to {len(blind)} signal(s) — the metrics "
            "source answers, but with no series where there should be some (a wrong selector, a dropped "
            "scrape job or a relabelling mistake), so these are not being judged:\n"
            + "\n".join(b.text() for b in blind))



def gpu_absent_text(nodes: list[str]) -> str:
    """The line every new incident carries for nodes without GPU telemetry."""
    return (f"GPU signals on {', '.join(nodes)}: no GPU telemetry from these nodes (a host without GPUs, "
            "or no GPU exporter), so temperature, clocks, ECC, Xid and GPU memory are not judged")
