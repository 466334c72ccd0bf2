"""The demo's terminal view of each gateway's golden signals, from its own /metrics."""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

import requests
from rich.table import Table

from oximeter.scrape import Sample, buckets, delta, quantile, scrape, total

WINDOW_SCRAPES = 15  # p99 over the last ~15 s, like a short rate() window


@dataclass
class GatewayWatch:
    """Scrapes one gateway and keeps a short window of histogram snapshots."""

    node: str
    url: str
    last: list[Sample] = field(default_factory=list)
    error: str = ""
    _wait: deque[dict[float, float]] = field(default_factory=lambda: deque(maxlen=WINDOW_SCRAPES))
    _ttft: deque[dict[float, float]] = field(default_factory=lambda: deque(maxlen=WINDOW_SCRAPES))

    def poll(self) -> None:
        """Scrape once; a failed scrape is shown, never raised."""
        try:
            self.last = scrape(f"{self.url}/metrics")
            self.error = ""
        except requests.RequestException as exc:
            self.error = type(exc).__name__
            return
        self._wait.append(buckets(self.last, "oximeter_queue_wait_seconds"))
        self._ttft.append(buckets(self.last, "oximeter_time_to_first_token_seconds"))

    def p99(self, which: str) -> float:
        """p99 over the window of ``wait`` or ``ttft``."""
        window = self._wait if which == "wait" else self._ttft
        if len(window) < 2:
            return math.nan
        return quantile(0.99, delta(window[-1], window[0]))


def _ms(seconds: float) -> str:
    return "–" if math.isnan(seconds) else f"{seconds * 1000:.0f} ms"


def render(gateways: list[GatewayWatch]) -> Table:
    """One row per gateway: queue, waits, in-flight and error counts."""
    table = Table(title="Oximeter demo — gateways (SIMULATION)")
    for column in ("node", "queue", "limit", "wait p99", "TTFT p99", "in-flight", "200", "429", "504", "499"):
        table.add_column(column, justify="right")
    for g in gateways:
        s = g.last
        if g.error:
            table.add_row(g.node, f"[red]{g.error}[/]", *[""] * 8)
            continue
        codes = [f"{total(s, 'oximeter_requests_total', code=c):.0f}" for c in ("200", "429", "504", "499")]
        table.add_row(
            g.node,
            f"{total(s, 'oximeter_queue_length'):.0f}",
            f"{total(s, 'oximeter_queue_limit'):.0f}",
            _ms(g.p99("wait")),
            _ms(g.p99("ttft")),
            f"{total(s, 'oximeter_inflight_requests'):.0f}",
            *codes,
        )
    return table
