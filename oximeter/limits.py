"""Limits written by name where a generated file shows them: ``[[signal.field]]``.

A signal's limits (its threshold, its ratio over the baseline, its traffic guard's minimum...) are
set once, in the analyzer's signal catalogue, and a configuration may override them. The files
that repeat a limit for another reader (the alerting rules' templates, the dashboards' threshold
steps, the digest chart's lines) name it instead, and are generated with the configured value, so
a configured limit reaches the alert, the dashboard and the chart as it reaches the analyzer.

``[[queue_wait_p99.threshold]]`` is the value; ``[[retry_ratio.threshold * 100]]`` and
``[[queue_wait_p99.min_traffic / 5]]`` scale it (a percentage, a guard counted over a shorter
window). Double brackets appear in neither PromQL nor Go templates, so a template stays readable
as the YAML it renders to.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from oximeter.errors import OximeterError

PLACEHOLDER = re.compile(r"\[\[\s*([a-z][a-z0-9_]*\.[a-z_]+)\s*(?:([*/])\s*(\d+(?:\.\d+)?)\s*)?\]\]")


class UnknownLimitError(OximeterError, ValueError):
    """A placeholder names a limit the catalogue does not set."""


def ref(name: str) -> str:
    """The placeholder for limit ``name`` (``signal.field``), for a value a generator fills in."""
    if not PLACEHOLDER.fullmatch(f"[[{name}]]"):
        raise ValueError(f"not a limit name: {name!r} (signal.field)")
    return f"[[{name}]]"


def value(match: re.Match[str], limits: Mapping[str, float], where: str = "") -> float:
    """The number one placeholder stands for."""
    name, op, operand = match.groups()
    if name not in limits:
        raise UnknownLimitError(f"{where or 'template'}: {match.group(0)} names no limit the catalogue sets "
                                f"(a configured override may have removed it)")
    number = limits[name]
    if op == "*":
        number *= float(operand)
    elif op == "/":
        number /= float(operand)
    return number


def number_text(number: float) -> str:
    """A limit as the rules and titles write it: ``1``, ``0.05``, ``1.5`` (no float noise)."""
    return f"{round(number, 9):g}"


def fill(text: str, limits: Mapping[str, float], where: str = "") -> str:
    """``text`` with every placeholder replaced by its limit's value."""
    return PLACEHOLDER.sub(lambda m: number_text(value(m, limits, where)), text)


def fill_data(data: Any, limits: Mapping[str, float], where: str = "") -> Any:
    """JSON-like ``data`` with placeholders filled: a string that is one placeholder becomes its
    number (a threshold step's value), any other string has its placeholders replaced in the text."""
    if isinstance(data, str):
        whole = PLACEHOLDER.fullmatch(data)
        if whole is None:
            return fill(data, limits, where)
        number = round(value(whole, limits, where), 9)
        return int(number) if number.is_integer() else number  # 1, as a hand-written 1 reads
    if isinstance(data, Mapping):
        return {key: fill_data(item, limits, where) for key, item in data.items()}
    if isinstance(data, list):
        return [fill_data(item, limits, where) for item in data]
    return data
