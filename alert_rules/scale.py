"""Rules with every duration divided by a factor, for live tests that cannot wait real minutes.

Live tests load time-scaled rules; the promtool unit tests keep the real durations.
Scaled are `for:` / `keep_firing_for:`, range selectors and subqueries (``[5m]``, ``[5m:1m]``) and
``offset``. Numbers are never touched: thresholds in seconds (queue wait > 1 s) are latencies, not
windows. The one numeric window, the Xid recency ``time() - ts < 300``, stays 5 minutes: longer than
the scaled windows, so a scaled test still sees the alert.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import yaml

from alert_rules import load_groups, rule_files
from oximeter.inputs import parse_duration_s

_DURATION = r"(?:\d+(?:ms|[smhdwy]))+"
_RANGE_RE = re.compile(rf"\[\s*({_DURATION})\s*(?::\s*({_DURATION})?\s*)?\]")
_OFFSET_RE = re.compile(rf"\boffset\s+(-?)({_DURATION})")


def parse_duration(text: str) -> float:
    """Seconds in a Prometheus duration such as ``1h30m`` or ``500ms``."""
    if not re.fullmatch(_DURATION, text):  # integers and units in order, as Prometheus writes them
        raise ValueError(f"not a Prometheus duration: {text!r}")
    return parse_duration_s(text, "PromQL duration", allow_number=False)


def format_duration(seconds: float) -> str:
    """A Prometheus duration, in whole milliseconds (at least 1 ms)."""
    ms = max(1, round(seconds * 1000))
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


def scale_duration(text: str, factor: float) -> str:
    """``text`` divided by ``factor`` (``5m`` / 10 -> ``30s``)."""
    return format_duration(parse_duration(text) / factor)


def scale_expr(expr: str, factor: float) -> str:
    """A PromQL expression with its range, subquery-step and offset durations divided by ``factor``."""
    def range_sub(match: re.Match[str]) -> str:
        window = scale_duration(match.group(1), factor)
        if match.group(0).find(":") < 0:
            return f"[{window}]"
        step = match.group(2)
        return f"[{window}:{scale_duration(step, factor) if step else ''}]"

    def offset_sub(match: re.Match[str]) -> str:
        return f"offset {match.group(1)}{scale_duration(match.group(2), factor)}"

    return _OFFSET_RE.sub(offset_sub, _RANGE_RE.sub(range_sub, expr))


# Alerts whose ``for`` is a grace for processes to start, not a fault's persistence: a compressed
# clock makes no process start faster, so a stack starting its last add-on would page for it.
STARTUP_GRACE = frozenset({"ScrapeJobMissing"})


def scale_groups(groups: list[dict[str, Any]], factor: float) -> list[dict[str, Any]]:
    """Deep copies of ``groups`` with every duration divided by ``factor`` (> 0), but the start-up
    grace of the ``STARTUP_GRACE`` alerts."""
    if factor <= 0:
        raise ValueError(f"time scale factor must be > 0, got {factor}")
    scaled = copy.deepcopy(groups)
    for group in scaled:
        if "interval" in group:
            group["interval"] = scale_duration(str(group["interval"]), factor)
        for rule in group["rules"]:
            rule["expr"] = scale_expr(str(rule["expr"]), factor)
            for key in ("for", "keep_firing_for"):
                if key in rule and rule.get("alert") not in STARTUP_GRACE:
                    rule[key] = scale_duration(str(rule[key]), factor)
    return scaled


def write_scaled_rules(out_dir: Path, factor: float, rules_dir: Path | None = None) -> list[Path]:
    """Write every rule file scaled by ``factor`` into ``out_dir``; returns the paths written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for path in rule_files(rules_dir) if rules_dir else rule_files():
        target = out_dir / path.name
        groups = scale_groups(load_groups(path), factor)
        target.write_text(yaml.safe_dump({"groups": groups}, sort_keys=False, allow_unicode=True),
                          encoding="utf-8")
        written.append(target)
    return written
