"""Dashboard queries as Grafana sends them.

``expand`` substitutes template variables and ``$__rate_interval`` / ``$__interval`` / ``$__range``
the way Grafana's Prometheus datasource does, so tests can run every panel's query against a real
Prometheus; ``annotation_queries`` renders each annotation's Infinity request the same way, so
tests can send it to a real analyzer API. (The metric names a query reads: ``oximeter.promql``.)
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

ALL = "$__all"


@dataclass(frozen=True)
class Timing:
    """What Grafana derives its interval variables from."""

    scrape_interval_s: float = 15.0  # the datasource's "Scrape interval" setting
    interval_s: float = 15.0  # $__interval: range / max data points, at least the scrape interval
    range_s: float = 3600.0  # the dashboard's time range

    @property
    def rate_interval_s(self) -> float:
        """Grafana's ``$__rate_interval``: max($__interval + scrape interval, 4 x scrape interval)."""
        return max(self.interval_s + self.scrape_interval_s, 4 * self.scrape_interval_s)


@dataclass(frozen=True)
class Variable:
    """The part of a template variable's definition that decides how its value is written."""

    name: str
    multi: bool
    include_all: bool
    all_value: str | None


@dataclass(frozen=True)
class RenderedQuery:
    """One panel target's query with every variable expanded."""

    dashboard: str
    panel: str
    ref_id: str
    expr: str


@dataclass(frozen=True)
class RenderedRequest:
    """One annotation query as the Infinity datasource sends it: a GET of ``path`` (relative to the
    datasource's base URL) with ``params``, and the columns it makes of each row of the answer."""

    dashboard: str
    name: str
    datasource: Mapping[str, str]
    path: str
    params: tuple[tuple[str, str], ...]
    columns: tuple[tuple[str, str, str], ...]  # (selector, column name, Infinity column type)


def duration(seconds: float) -> str:
    """A PromQL duration: whole seconds as ``60s``, otherwise milliseconds."""
    ms = round(seconds * 1000)
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


def regular_escape(value: str) -> str:
    """Grafana's ``prometheusRegularEscape`` (single-value variables)."""
    return value.replace("\\", "\\\\").replace("'", "\\\\'")


def special_regex_escape(value: str) -> str:
    """Grafana's ``prometheusSpecialRegexEscape`` (multi-value and All variables, used with ``=~``)."""
    value = value.replace("\\", "\\\\\\\\")
    return re.sub(r"[$^*{}\[\]'+?.()|]", lambda m: "\\\\" + m.group(0), value)


def format_value(variable: Variable, selected: Sequence[str], all_values: Sequence[str] = ()) -> str:
    """The text Grafana puts in place of ``$name`` for ``selected`` values (``[ALL]`` = All)."""
    values = list(selected)
    if values == [ALL]:
        if variable.all_value is not None:
            return variable.all_value  # inserted as is: it is already a regex
        values = list(all_values)
    if not variable.multi and not variable.include_all:
        return regular_escape(values[0]) if values else ""
    escaped = [special_regex_escape(v) for v in values]
    return escaped[0] if len(escaped) == 1 else "(" + "|".join(escaped) + ")"


# $name, ${name}, ${name:format}, [[name]]; `$1` in label_replace is not a variable (not in values).
_VARIABLE_RE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\[\[(\w+)(?::\w+)?\]\]|\$(\w+)")


def expand(expr: str, values: Mapping[str, str], timing: Timing = Timing()) -> str:
    """``expr`` with built-in interval variables and the given (already formatted) values substituted."""
    builtins = {
        "__rate_interval": duration(timing.rate_interval_s),
        "__interval": duration(timing.interval_s),
        "__interval_ms": str(round(timing.interval_s * 1000)),
        "__range": duration(timing.range_s),
        "__range_s": str(round(timing.range_s)),
        "__range_ms": str(round(timing.range_s * 1000)),
    }

    def substitute(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2) or match.group(3)
        if name in builtins:
            return builtins[name]
        return values.get(name, match.group(0))

    return _VARIABLE_RE.sub(substitute, expr)


def variables_of(dashboard: Mapping[str, Any]) -> dict[str, Variable]:
    """The dashboard's label variables (the datasource variable is not part of queries)."""
    found = {}
    for item in dashboard.get("templating", {}).get("list", []):
        if item.get("type") == "datasource":
            continue
        found[item["name"]] = Variable(
            name=item["name"], multi=bool(item.get("multi")), include_all=bool(item.get("includeAll")),
            all_value=item.get("allValue") or None,
        )
    return found


def variable_queries(dashboard: Mapping[str, Any]) -> dict[str, str]:
    """{variable name: the query that lists its values} for query variables."""
    return {item["name"]: item["query"] for item in dashboard.get("templating", {}).get("list", [])
            if item.get("type") == "query"}


def _panels(panels: Sequence[Mapping[str, Any]]) -> Iterator[Mapping[str, Any]]:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels", []))  # rows hold their own panels


def panel_queries(dashboard: Mapping[str, Any], selection: Mapping[str, Sequence[str]] | None = None,
                  timing: Timing = Timing()) -> list[RenderedQuery]:
    """Every panel target's query expanded; variables not in ``selection`` are All."""
    selection = selection or {}
    values = {name: format_value(var, selection.get(name, [ALL]))
              for name, var in variables_of(dashboard).items()}
    return [
        RenderedQuery(dashboard=str(dashboard.get("title", "")), panel=str(panel.get("title", "")),
                      ref_id=str(target.get("refId", "")), expr=expand(target["expr"], values, timing))
        for panel in _panels(dashboard.get("panels", []))
        for target in panel.get("targets", [])
        if target.get("expr")
    ]


def annotation_queries(dashboard: Mapping[str, Any], start_ms: int, end_ms: int) -> list[RenderedRequest]:
    """Every annotation query of ``dashboard`` that fetches a URL, with Grafana's ``${__from}`` and
    ``${__to}`` (epoch ms of the time range) and its variables (All) expanded."""
    values = {name: format_value(var, [ALL]) for name, var in variables_of(dashboard).items()}
    values |= {"__from": str(start_ms), "__to": str(end_ms)}
    out = []
    for item in dashboard.get("annotations", {}).get("list", []):
        target = item.get("target") or {}
        if target.get("source") != "url":
            continue
        params = (target.get("url_options") or {}).get("params") or []
        out.append(RenderedRequest(
            dashboard=str(dashboard.get("title", "")), name=str(item.get("name", "")),
            datasource=dict(item.get("datasource") or {}), path=expand(str(target.get("url", "")), values),
            params=tuple((str(p["key"]), expand(str(p["value"]), values)) for p in params),
            columns=tuple((str(c["selector"]), str(c["text"]), str(c["type"]))
                          for c in target.get("columns", [])),
        ))
    return out
