"""The digest's PNG: queue_wait p99, 504 ratio, GPU utilisation and every SLO's burn over the day
(matplotlib, Agg).

A panel of a catalogue signal draws that signal's limit (``signal.field``) as a dashed red line:
the number the analyzer and the alert judge by, with the configuration's overrides; the burn panel
draws the configured ticket's burn (``slos.ticket_burn``).
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, tzinfo

import matplotlib

matplotlib.use("Agg")  # no display: render to bytes only (must precede pyplot's import)

import matplotlib.dates as mdates
import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from analyzer.signals.slo import SloSettings
from reporter.digest_budget import CHART_PREFIX

# (series key, axis label, the name of the limit drawn across it (``chart_limits``), or None).
PANELS = (
    ("queue_wait_p99_s", "queue wait p99 (s)", "queue_wait_p99.threshold"),
    ("ratio_504", "504 ratio", "error_504_ratio.threshold"),
    ("gpu_utilization", "GPU utilisation (fleet mean)", None),
    # Every SLO's 1 h burn in one panel, a line each; drawn against the ticket's burn.
    (CHART_PREFIX, "error-budget burn, 1 h (×)", "slos.ticket_burn"),
)
WIDTH_PX, HEIGHT_PX, DPI = 1000, 750, 100  # well under WeCom's 2 MB image limit


def chart_limits(limits: Mapping[str, float], slos: SloSettings | None = None) -> dict[str, float]:
    """The limits the chart draws: the signals' (``analyzer.service.limits.limits``) and the
    objectives' ticket burn (``slos``; unset: the defaults)."""
    return {**limits, "slos.ticket_burn": (slos or SloSettings()).ticket_burn}


def figure(series: Mapping[str, Sequence[tuple[float, float]]], title: str, limits: Mapping[str, float],
           tz: tzinfo = UTC) -> Figure:
    """The chart: one panel per series, with its signal's limit (from ``limits``) where it has one.
    The caller closes it (``plt.close``)."""
    fig, axes = plt.subplots(len(PANELS), 1, figsize=(WIDTH_PX / DPI, HEIGHT_PX / DPI), dpi=DPI,
                             sharex=True)
    for ax, (key, label, limit) in zip(axes, PANELS, strict=True):
        lines = {name: points for name, points in series.items() if points and
                 (name == key or (key == CHART_PREFIX and name.startswith(CHART_PREFIX)))}
        for name, points in lines.items():
            ax.plot([datetime.fromtimestamp(t, tz) for t, _ in points], [v for _, v in points],
                    linewidth=1.2, label=name.removeprefix(CHART_PREFIX))
        if key == CHART_PREFIX and lines:
            ax.legend(fontsize=7, loc="upper left")
        if not lines:
            ax.text(0.5, 0.5, "no data", transform=ax.transAxes, ha="center", va="center")
        if limit is not None:
            ax.axhline(limits[limit], color="red", linestyle="--", linewidth=0.8)
        ax.set_ylabel(label, fontsize=8)
        ax.grid(True, alpha=0.3)
    axes[-1].xaxis.set_major_formatter(mdates.DateFormatter("%H:%M", tz=tz))
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def render_chart(series: Mapping[str, Sequence[tuple[float, float]]], title: str, limits: Mapping[str, float],
                 tz: tzinfo = UTC) -> bytes:
    """PNG bytes of ``figure``."""
    fig = figure(series, title, limits, tz)
    try:
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", dpi=DPI)
        return buffer.getvalue()
    finally:
        plt.close(fig)
