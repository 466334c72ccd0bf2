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
