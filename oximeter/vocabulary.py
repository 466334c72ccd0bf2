"""The words every component shares for where a fault lives and how bad it is, in their order.

Layers run bottom up (hardware first): a lower layer is the likelier root cause, and ties in the
diagnosis go to it. Severities run least first, so a rank compares them. Plain strings (Literal
types), as they are stored, sent and configured; standard library only.
"""

from __future__ import annotations

from typing import Literal, get_args

Layer = Literal["infrastructure", "platform", "engine", "dependency", "scheduling", "ingress"]
LAYERS: tuple[Layer, ...] = get_args(Layer)  # bottom first

Severity = Literal["info", "warning", "critical"]
SEVERITIES: tuple[Severity, ...] = get_args(Severity)  # least first
SEVERITY_RANK: dict[str, int] = {severity: rank for rank, severity in enumerate(SEVERITIES)}
# What chat prints for each: critical pages (P0), warning is P1, info is P2.
PRIORITY: dict[str, str] = {"critical": "P0", "warning": "P1", "info": "P2"}


def as_severity(value: str) -> Severity:
    """``value`` as a Severity; ValueError naming the known ones otherwise."""
    for known in SEVERITIES:
        if value == known:
            return known
    raise ValueError(f"unknown severity {value!r} (one of {', '.join(SEVERITIES)})")


def priority(severity: str) -> str:
    """``P0`` (pages), ``P1`` or ``P2``."""
    return PRIORITY[as_severity(severity)]
