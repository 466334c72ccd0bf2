"""Which signals a stock fleet can feed, and which it cannot for want of an input.

With ``analyzer.inputs: stock`` the series the signals read come from the adapter recording rules
(``alert_rules/adapters/``), which translate dcgm-exporter, vLLM and kube-state-metrics. This
module reads those rules to learn which exporter inputs feed which translated series, so that the
answer follows the rules as written: a signal is unavailable when a series it reads has no adapter
rule whose inputs are exported (an ECC field dcgm-exporter was not told to collect), or when no
stock exporter has such a series at all (what only Oximeter's gateway sees). ``oximeter config
check`` and the analyzer's start-up both print this, so a missing input is never a silent quiet.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from alert_rules import ADAPTERS_DIR, load_catalogue, load_groups, recording_rules, rule_files
from analyzer.signals.spec import SignalSpec
from exporter.dcgm import DCGM_DEFAULT_FIELDS, counters_line
from oximeter.promql import metric_names

_EXPORTER_NAME = re.compile(r"^(DCGM_|vllm:|kube_)")
# Producers of the metric catalogue that a stock fleet runs too: vLLM itself, Prometheus, and
# Oximeter's analyzer and reporter (the gateway, the exporter and the simulator it does not run).
RUN_ON_STOCK = frozenset({"vllm", "prometheus", "analyzer", "reporter"})
# `... unless on (labels) name`: a stand-down guard, not an input the rule needs.
_GUARD = re.compile(r"\bunless\s+on\s*\([^)]*\)\s*[A-Za-z_:][\w:]*")
# `... and on (labels) (...)`: a condition on other series (a GPU the exporter reported), not an input.
_CONDITION = re.compile(r"\band\s+on\s*\([^)]*\)\s*\([^()]*\)")
_MATCHER = re.compile(r'([A-Za-z_]\w*)\s*=\s*"([^"]*)"')


def read_counters_csv(path: str | Path) -> frozenset[str]:
    """The fields a dcgm-exporter counters CSV enables (``FIELD, type, help``; ``#`` comments)."""
    text = Path(path).read_text(encoding="utf-8")
    fields = (line.split(",", 1)[0].strip() for line in text.splitlines())
    return frozenset(f for f in fields if f and not f.startswith("#"))


@dataclass(frozen=True)
class AdapterRule:
    """One adapter recording rule: what it records (name and fixed labels) from which inputs."""

    record: str
    labels: Mapping[str, str]
    inputs: frozenset[str]


def adapter_rules(adapters_dir: Path = ADAPTERS_DIR) -> list[AdapterRule]:
    """Every adapter recording rule, its inputs being the exporter series its expression reads."""
    out = []
    for path in rule_files(adapters_dir):
        for group in load_groups(path):
            for rule in group["rules"]:
                if "record" in rule:
                    names = metric_names(_CONDITION.sub(" ", _GUARD.sub(" ", rule["expr"])))
                    labels = {k: str(v) for k, v in (rule.get("labels") or {}).items()}
                    out.append(AdapterRule(rule["record"], labels,
                                           frozenset(n for n in names if _EXPORTER_NAME.match(n))))
    return out


def _exported(name: str, dcgm_fields: frozenset[str]) -> bool:
    # vLLM serves all its series and kube-state-metrics its default families; only dcgm-exporter
    # collects just the fields its counters file lists.
    return name in dcgm_fields if name.startswith("DCGM_") else True


def _branches(promql: str) -> list[str]:
    """The top-level ``or`` alternatives of a query (any one of them feeds the signal)."""
    parts, depth, start = [], 0, 0
    for m in re.finditer(r"[()]|\bor\b", promql):
        token = m.group(0)
        if token in "()":
            depth += 1 if token == "(" else -1
        elif depth == 0:
            parts.append(promql[start:m.start()])
            start = m.end()
    return [*parts, promql[start:]]


@dataclass(frozen=True)
class MissingSeries:
    """A series some signals read that the stock inputs do not produce."""

    selector: str  # the name with the equality matchers the signals use, e.g. {kind="corrected"}
    needs: tuple[str, ...]  # exporter fields that would produce it; empty: no stock exporter does
    signals: tuple[str, ...]


class StockInputs:
    """What a stock fleet exports (``dcgm_fields``: the fields dcgm-exporter collects)."""

    def __init__(self, dcgm_fields: Iterable[str] = DCGM_DEFAULT_FIELDS,
                 rules: list[AdapterRule] | None = None) -> None:
        self.dcgm_fields = frozenset(dcgm_fields)
        self.rules = adapter_rules() if rules is None else rules

    def _missing_in(self, expr: str) -> list[tuple[str, tuple[str, ...]]]:
        """(selector, inputs that would make it) for each series of ``expr`` nothing produces."""
        missing: list[tuple[str, tuple[str, ...]]] = []
        for name in sorted(metric_names(expr)):
            matchers: dict[str, str] = {}
            for block in re.findall(rf"(?<![\w:]){re.escape(name)}\{{([^}}]*)\}}", expr):
                matchers.update(_MATCHER.findall(block))
            if _EXPORTER_NAME.match(name) or name == "up":  # read as exported, not translated
                if not _exported(name, self.dcgm_fields):
                    missing.append((name, (name,)))
                continue
            rules = [r for r in self.rules if r.record == name
                     and all(r.labels.get(k, v) == v for k, v in matchers.items())]
            if not any(_exported(i, self.dcgm_fields) for r in rules for i in r.inputs):
                # Matchers tell apart the series of one name that different fields feed (ECC kinds).
                selector = name + ("{" + ",".join(f'{k}="{v}"' for k, v in sorted(matchers.items())) + "}"
                                   if matchers and rules else "")
                missing.append((selector, tuple(sorted({i for r in rules for i in r.inputs}))))
        return missing

    def producible(self, expr: str) -> bool:
        """Whether a query (a dashboard panel's, say) can have data on a stock fleet: some top-level
        alternative reads only series the stock exporters, the adapters, the recording rules over
        them, or Oximeter's own analyzer and reporter (which a stock fleet runs too) produce."""
        return any(all(self._producible_name(n, ()) for n in metric_names(b)) for b in _branches(expr))

    def _producible_name(self, name: str, seen: tuple[str, ...]) -> bool:
        if _EXPORTER_NAME.match(name) or name in ("up", "ALERTS", "ALERTS_FOR_STATE"):
            return _exported(name, self.dcgm_fields)
        adapters = [r for r in self.rules if r.record == name]
        if adapters:
            return any(_exported(i, self.dcgm_fields) for r in adapters for i in r.inputs)
        recorded = [r["expr"] for r in recording_rules() if r["record"] == name]
        if recorded:
            return name not in seen and any(
                all(self._producible_name(n, (*seen, name)) for n in metric_names(b))
                for expr in recorded for b in _branches(_GUARD.sub(" ", expr)))
        family = re.sub(r"_(bucket|sum|count)$", "", name)
        producer = _producers().get(name, _producers().get(family))
        return producer in RUN_ON_STOCK

    def missing(self, catalogue: Mapping[str, SignalSpec]) -> list[MissingSeries]:
        """The series the catalogue's signals need and the stock inputs lack, with those signals."""
        found: dict[tuple[str, tuple[str, ...]], list[str]] = {}
        for name, spec in catalogue.items():
            for expr in filter(None, (spec.promql, spec.min_traffic.promql if spec.min_traffic else "")):
                # A signal is fed when any one of its top-level alternatives is.
                per_branch = [self._missing_in(b) for b in _branches(expr)]
                if all(per_branch):
                    for key in per_branch[0]:
                        found.setdefault(key, []).append(name)
        return [MissingSeries(sel, needs, tuple(dict.fromkeys(signals)))
                for (sel, needs), signals in sorted(found.items())]

    def unavailable(self, catalogue: Mapping[str, SignalSpec]) -> set[str]:
        """The signals that cannot be judged on these inputs."""
        return {s for m in self.missing(catalogue) for s in m.signals}


@functools.cache
def _producers() -> dict[str, str]:
    """Metric name -> its producer, from the metric catalogue."""
    return {m["name"]: m["producer"] for m in load_catalogue()}


def _producer_of(selector: str) -> str | None:
    family = re.sub(r"_(bucket|sum|count)$", "", selector)
    return _producers().get(selector, _producers().get(family))


def gateway_only(missing: Iterable[MissingSeries]) -> list[MissingSeries]:
    """The missing series only Oximeter's gateway produces (admission 429s, edge 504s, the queue's
    limit, answers and retries): facts of the request path that no stock exporter sees, so every
    incident on stock inputs is judged without them (its severity and impact would read them)."""
    return [m for m in missing if not m.needs and _producer_of(m.selector) == "gateway"]


def describe(missing: Iterable[MissingSeries]) -> list[str]:
    """One line per missing series: what would produce it and which signals it disables."""
    lines = []
    for m in missing:
        if m.needs:
            source = f"needs {' or '.join(m.needs)}, which dcgm-exporter's counters do not enable"
            line = next(filter(None, map(counters_line, m.needs)), None)
            source += f" (add the line `{line}` to its counters file)" if line else ""
        else:
            producer = _producer_of(m.selector) or "own components"
            source = f"no stock exporter has it (only Oximeter's {producer})"
        lines.append(f"{m.selector}: {source}; unavailable signals: {', '.join(m.signals)}")
    return lines
