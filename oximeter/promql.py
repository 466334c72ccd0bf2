"""The metric names any PromQL text reads: a small lexer (no PromQL parser exists in Python here).

Shared by the analyzer (which exporter series a stock adapter rule reads) and the metric-name
contract tests of the rules and dashboards.
"""

from __future__ import annotations

import re

_STRING_RE = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_GROUPING_RE = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_NAME_RE = re.compile(r"(?<![\w.:])([a-zA-Z_:][\w:]*)(?![\w:])(?!\s*\()")
_KEYWORDS = frozenset({"and", "or", "unless", "by", "without", "on", "ignoring", "group_left",
                       "group_right", "offset", "bool", "inf", "nan", "Inf", "NaN"})
_LABEL_VALUES_RE = re.compile(r"label_values\(\s*([a-zA-Z_:][\w:]*)\s*[{,]")


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression (or a ``label_values(metric, label)`` query) reads."""
    found = set(_LABEL_VALUES_RE.findall(expr))
    if expr.lstrip().startswith("label_values("):
        return found
    text = _STRING_RE.sub('""', expr)
    text = re.sub(r"\{[^}]*\}", " ", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", " ", text)  # ranges and subqueries
    text = _GROUPING_RE.sub(" ", text)
    text = re.sub(r"\boffset\s+-?[\dsmhdwy]+", " ", text)
    text = re.sub(r"@\s*(?:start\(\)|end\(\)|[\d.]+)", " ", text)
    return found | {name for name in _NAME_RE.findall(text) if name not in _KEYWORDS}
