"""Repeated dashboard shapes as plain functions: variables, panels, layout, annotations.

Every ``*.dashboard.py`` source builds its ``dashboard`` from these, so all dashboards share one
datasource variable, one set of label filters, current panel types only (time series, stat,
table, bar gauge, heatmap) and the analyzer's incidents as annotations.
"""

from __future__ import annotations

from collections.abc import Sequence

import attr
from grafanalib.core import (
    Annotations,
    BarGauge,
    Dashboard,
    GridPos,
    Heatmap,
    Panel,
    Stat,
    Table,
    Target,
    Template,
    Templating,
    Time,
    TimeSeries,
)

from oximeter.limits import ref

# Panels name the datasource through the variable, so one dashboard serves any Prometheus.
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}

# The analyzer's incidents reach Grafana through the Infinity plugin (a JSON API datasource),
# named through a variable too, so any Infinity datasource whose base URL is the analyzer serves.
INFINITY = "yesoreyeram-infinity-datasource"
ANALYZER = {"type": INFINITY, "uid": "${analyzer}"}

# Label filters, written once. `=~` because every variable is multi-value with "All" = `.*`.
GATEWAY = 'service=~"$service", node=~"$node"'
NODE = 'node=~"$node"'
GPU = 'node=~"$node", gpu=~"$gpu"'

# Queries that list each variable's values. Nodes come from the gateways' target info (filtered by
# the chosen services) unless a dashboard names the metric whose nodes it shows.
_VARIABLE_QUERIES: dict[str, str] = {
    "service": "label_values(oximeter_target_info, service)",
    "gpu": "label_values(oximeter_gpu_up{node=~\"$node\"}, gpu)",
}

Query = tuple[str, str]  # (PromQL, legend)
_BASE_STEP: dict[str, str | float | None] = {"color": "green", "value": None}


def variables(*names: str, node_source: str | None = None) -> Templating:
    """The datasource variable plus the named label variables (multi-value, with All = `.*`)."""
    items = [Template(name="datasource", label="Data source", query="prometheus", type="datasource"),
             Template(name="analyzer", label="Incidents from", query=INFINITY, type="datasource")]
    for name in names:
        if name == "node":
            if node_source is not None:
                query = f"label_values({node_source}, node)"
            elif "service" in names:
                query = 'label_values(oximeter_target_info{service=~"$service"}, node)'
            else:
                query = "label_values(oximeter_target_info, node)"
        else:
            query = _VARIABLE_QUERIES[name]
        items.append(Template(
            name=name, label=name, query=query, dataSource=DATASOURCE, type="query",
            multi=True, includeAll=True, allValue=".*", refresh=2, sort=1,
            default="$__all",
        ))
    return Templating(list=items)


def _targets(queries: Sequence[Query], *, instant: bool = False, fmt: str = "time_series") -> list[Target]:
    return [
        Target(expr=expr, legendFormat=legend, refId=chr(ord("A") + i), instant=instant, format=fmt,
               datasource=DATASOURCE)
        for i, (expr, legend) in enumerate(queries)
    ]


def _size(panel: Panel, width: int, height: int) -> Panel:
    return attr.evolve(panel, gridPos=GridPos(h=height, w=width, x=0, y=0))


def timeseries(title: str, queries: Sequence[Query], *, unit: str = "short", width: int = 12,
               height: int = 8, description: str = "", overrides: Sequence[dict[str, object]] = (),
               max_value: float | None = None) -> Panel:
    """A time series panel."""
    panel = TimeSeries(title=title, description=description, dataSource=DATASOURCE,
                       targets=_targets(queries), unit=unit, overrides=list(overrides),
                       valueMax=max_value)
    return _size(panel, width, height)


def limit(name: str) -> str:
    """A limit of the analyzer's signal catalogue (``signal.field``) as a threshold step's value:
    the build writes the catalogue's number, or the configuration's, so the panel turns red where
    the analyzer and the alert judge."""
    return ref(name)


def stat(title: str, queries: Sequence[Query], *, unit: str = "short", width: int = 6, height: int = 5,
         description: str = "", thresholds: Sequence[tuple[float | str | None, str]] = ()) -> Panel:
    """A single-value stat panel; ``thresholds`` are (from value, colour), the first from None; a
    value may be a catalogue ``limit``."""
    # Plain dicts: grafanalib's Threshold writes the base step's value as the string "null".
    steps = [{"color": color, "value": value} for value, color in thresholds] or [_BASE_STEP]
    panel = Stat(title=title, description=description, dataSource=DATASOURCE,
                 targets=_targets(queries, instant=True), format=unit, reduceCalc="lastNotNull",
                 thresholds=steps)
    return _size(panel, width, height)


def bargauge(title: str, queries: Sequence[Query], *, unit: str = "short", width: int = 12,
             height: int = 8, description: str = "", max_value: float = 1.0) -> Panel:
    """A bar gauge, one bar per series (peer comparisons, counts by label)."""
    panel = BarGauge(title=title, description=description, dataSource=DATASOURCE,
                     targets=_targets(queries, instant=True), format=unit, max=max_value,
                     orientation="horizontal", displayMode="gradient", calc="lastNotNull",
                     thresholds=[_BASE_STEP])
    return _size(panel, width, height)


def table(title: str, queries: Sequence[Query], *, width: int = 12, height: int = 8,
          description: str = "", unit: str = "short") -> Panel:
    """A table of instant values, one row per series."""
    panel = Table(title=title, description=description, dataSource=DATASOURCE,
                  targets=_targets(queries, instant=True, fmt="table"), unit=unit,
                  transformations=[{"id": "merge", "options": {}}])
    return _size(panel, width, height)


def heatmap(title: str, query: Query, *, width: int = 12, height: int = 8, description: str = "") -> Panel:
    """A heatmap of a histogram's buckets (query summed ``by (le)``)."""
    panel = Heatmap(title=title, description=description, dataSource=DATASOURCE,
                    targets=_targets([query], fmt="heatmap"), dataFormat="tsbuckets",
                    hideZeroBuckets=True)
    return _size(panel, width, height)


def right_axis(legend_regex: str, unit: str) -> dict[str, object]:
    """A field override putting the series whose legend matches on a right axis with its own unit."""
    return {
        "matcher": {"id": "byRegexp", "options": legend_regex},
        "properties": [
            {"id": "custom.axisPlacement", "value": "right"},
            {"id": "unit", "value": unit},
        ],
    }


def _flow(panels: Sequence[Panel]) -> list[Panel]:
    """Lay panels out left to right in a 24-column grid, wrapping rows."""
    placed: list[Panel] = []
    x = y = row_height = 0
    for panel in panels:
        pos = panel.gridPos
        if x + pos.w > 24:
            x, y, row_height = 0, y + row_height, 0
        placed.append(attr.evolve(panel, id=len(placed) + 1,
                                  gridPos=GridPos(h=pos.h, w=pos.w, x=x, y=y)))
        x += pos.w
        row_height = max(row_height, pos.h)
    return placed


def incident_annotations() -> Annotations:
    """The analyzer's incidents as region annotations (onset to resolution), from its
    ``/api/annotations`` through Infinity: columns named as Grafana's annotations read them,
    times in epoch ms, ``tags`` one comma-separated string."""
    columns = [{"selector": name, "text": name, "type": kind} for name, kind in (
        ("time", "timestamp_epoch"), ("timeEnd", "timestamp_epoch"), ("title", "string"),
        ("text", "string"), ("tags", "string"))]
    return Annotations(list=[{
        "name": "Incidents", "enable": True, "hide": False, "iconColor": "red", "datasource": ANALYZER,
        "target": {
            "refId": "incidents", "type": "json", "source": "url", "parser": "backend", "format": "dataframe",
            "url": "/api/annotations", "root_selector": "", "columns": columns,
            "url_options": {"method": "GET", "data": "", "params": [
                {"key": "from", "value": "${__from}"}, {"key": "to", "value": "${__to}"}]},
        },
    }])


def make_dashboard(title: str, uid: str, description: str, panels: Sequence[Panel],
              templating: Templating) -> Dashboard:
    """A dashboard with Oximeter's defaults: last hour, 30 s refresh, tagged, panels laid out,
    incidents annotated."""
    return Dashboard(
        title=title, uid=uid, description=description, tags=["oximeter"], timezone="utc",
        time=Time("now-1h", "now"), refresh="30s", templating=templating, panels=_flow(panels),
        annotations=incident_annotations(), editable=False,
    )
