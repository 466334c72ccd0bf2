"""Generate ``docs/configuration.md`` and ``docs/metrics.md`` from the code, and the thresholds
``docs/runbook.md`` quotes, so they cannot drift.

    .venv/bin/python scripts/gen_docs.py          # rewrite both files
    .venv/bin/python scripts/gen_docs.py --check  # exit 1 and name the stale files (tests/test_docs.py)

The configuration reference walks ``config_model().model_json_schema()`` (oximeter/config.py):
every section and key with its type, constraints, default and description (a field's ``description``, else the
comment beside or above it in the settings model). The metric reference joins the contract
(``alert_rules/metric_catalogue.yml``: name, type, labels, producer) with the help text the
producers actually register (every call in their packages whose first two arguments are a metric
name and a help string), and lists the analyzer's signal catalogue (``analyzer/signals/catalogue.py``).
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import functools
import inspect
import json
import re
import sys
import typing
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic_core import to_jsonable_python

ROOT = Path(__file__).resolve().parent.parent
CONFIGURATION = ROOT / "docs" / "configuration.md"
METRICS = ROOT / "docs" / "metrics.md"
RUNBOOK = ROOT / "docs" / "runbook.md"
PRODUCER_PACKAGES = ("gateway", "exporter", "simulator", "analyzer", "reporter")
_FIELD = re.compile(r"^\s+(\w+)\s*:\s*[^=#]+(?:=[^#]*)?(?:#\s*(.*))?$")
_COMMENT = re.compile(r"^\s+#\s?(.*)$")
Row = tuple[str, str, str, str]  # one configuration key: (key, type, default, description)


# -- configuration ------------------------------------------------------------------------------------
def field_types(model: type) -> dict[str, Any]:
    """``name -> annotation`` of a pydantic model or a stdlib dataclass (the light components' settings)."""
    if isinstance(model, type) and issubclass(model, BaseModel):
        return {name: field.annotation for name, field in model.model_fields.items()}
    if dataclasses.is_dataclass(model):
        return typing.get_type_hints(model)
    return {}


def models_of(root: type[BaseModel]) -> dict[str, type]:
    """Every settings model reachable from ``root``'s fields, by its schema title (class name)."""
    found: dict[str, type] = {}

    def visit(tp: Any) -> None:
        fields = field_types(tp) if isinstance(tp, type) and tp.__name__ not in found else {}
        if fields:
            found[tp.__name__] = tp
            for annotation in fields.values():
                visit(annotation)
        for arg in typing.get_args(tp):
            visit(arg)

    visit(root)
    return found


def field_comments(model: type) -> dict[str, str]:
    """``name -> comment``: the comment beside a field, else the comment lines right above it."""
    try:
        lines = inspect.getsource(model).splitlines()
    except (OSError, TypeError):
        return {}
    names = field_types(model)
    out: dict[str, str] = {}
    above: list[str] = []
    for line in lines[1:]:
        comment = _COMMENT.match(line)
        if comment:
            above.append(comment.group(1).strip())
            continue
        field = _FIELD.match(line)
        if field and field.group(1) in names:
            text = field.group(2) or " ".join(above)
            if text:
                out[field.group(1)] = text.strip()
        above = []
    return out


def _ref(prop: Mapping[str, Any]) -> str | None:
    ref = prop.get("$ref")
    return str(ref).rsplit("/", 1)[-1] if ref else None


def type_text(prop: Mapping[str, Any]) -> str:
    """A JSON-schema property as a reader types it in YAML."""
    if (name := _ref(prop)) is not None:
        return name
    if "anyOf" in prop:
        parts = [type_text(p) for p in prop["anyOf"]]
        text = " or ".join(dict.fromkeys(p for p in parts if p != "null"))
        return text + (" or null" if "null" in parts else "")
    if "enum" in prop:
        return " | ".join(json.dumps(v) for v in prop["enum"])
    if "const" in prop:
        return json.dumps(prop["const"])
    kind = prop.get("type", "any")
    if kind == "array":
        return f"list of {type_text(prop.get('items', {}))}"
    if kind == "object":
        extra = prop.get("additionalProperties")
        return f"map of {type_text(extra)}" if isinstance(extra, dict) and extra else "mapping"
    if prop.get("format") == "password":
        return "secret string"
    return str(kind)


def constraint_text(prop: Mapping[str, Any]) -> str:
    """``> 0``, ``0 … 65535`` and the like."""
    marks = [(">", "exclusiveMinimum"), ("≥", "minimum"), ("<", "exclusiveMaximum"), ("≤", "maximum"),
             ("min length", "minLength"), ("max length", "maxLength"), ("min items", "minItems")]
    return ", ".join(f"{sign} {prop[key]:g}" if isinstance(prop[key], float) else f"{sign} {prop[key]}"
                     for sign, key in marks if key in prop)


def default_text(prop: Mapping[str, Any], required: bool = False) -> str:
    """The default as YAML-ish JSON; nested sections say so instead of repeating their keys."""
    if "default" not in prop:
        return "(required)" if required else "(empty)"
    value = prop["default"]
    if isinstance(value, dict) and value and (_ref(prop) or "properties" in prop):
        return "(section)"
    return "`" + json.dumps(value, ensure_ascii=False) + "`"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def config_rows(model: str, schema: Mapping[str, Any], prefix: str,
                models: Mapping[str, type]) -> Iterator[tuple[str, str, str, str]]:
    """``(key, type, default, description)`` for every key under ``prefix``, nested sections inlined."""
    defs = schema["$defs"]
    node = defs[model]
    comments = field_comments(models[model]) if model in models else {}
    for name, prop in node.get("properties", {}).items():
        key = f"{prefix}.{name}" if prefix else name
        kind = type_text(prop)
        limits = constraint_text(prop)
        description = prop.get("description") or comments.get(name, "")
        cls = models.get(model)
        field = cls.model_fields.get(name) if isinstance(cls, type) and issubclass(cls, BaseModel) else None
        if "default" not in prop and field is not None and not field.is_required():
            # A default_factory is not in the schema: ask the field itself.
            value = field.get_default(call_default_factory=True)
            prop = {**prop, "default": to_jsonable_python(value)}  # models, and lists of them
        default = default_text(prop, name in node.get("required", ()))
        yield key, kind + (f" ({limits})" if limits else ""), default, description
        # A nested section, or one that may be null (``Availability | None``: anyOf the two).
        nested = [_ref(prop), *(_ref(option) for option in prop.get("anyOf", []))]
        if (ref := next((r for r in nested if r is not None), None)) is not None:
            yield from config_rows(ref, schema, key, models)
        items = prop.get("items", {})
        if (ref := _ref(items)) is not None:
            yield from config_rows(ref, schema, f"{key}[]", models)
        extra = prop.get("additionalProperties")
        if isinstance(extra, dict) and (ref := _ref(extra)) is not None:
            yield from config_rows(ref, schema, f"{key}.<name>", models)


def config_sections() -> Iterator[tuple[str, str, str, list[Row]]]:
    """``(section, model, model docstring, rows)`` for every section of the one YAML config."""
    from oximeter.config import config_model

    schema = config_model().model_json_schema()
    models = models_of(config_model())
    for section, prop in schema["properties"].items():
        model = _ref(prop)
        if model is not None:
            doc = (schema["$defs"][model].get("description") or "").strip()
            yield section, model, doc, list(config_rows(model, schema, section, models))


def render_configuration() -> str:
    """The whole configuration reference."""
    out = ["# Configuration reference", "",
           "<!-- Generated by `python scripts/gen_docs.py` from the pydantic models; do not edit. -->", "",
           "One YAML file (`--config FILE`, default `./oximeter.yaml`); every key is optional and has a",
           "safe default. Unknown keys are refused with the file and key named. Secrets (chat webhooks,",
           "tokens) are never keys: the settings name an environment variable, read from the",
           "environment or from `<NAME>_FILE` (`oximeter/secrets.py`). Check a file with",
           "`oximeter config check FILE`: it prints `FILE: ok`, or every problem with its key (exit 1).", "",
           "```console", "$ oximeter config check deploy/oximeter.compose.yaml",
           "deploy/oximeter.compose.yaml: ok", "```", ""]
    for section, model, doc, rows in config_sections():
        out += [f"## `{section}`", "", f"{doc} (`{model}`)" if doc else f"`{model}`", "",
                "| key | type | default | description |", "|---|---|---|---|"]
        out += [f"| `{_cell(k)}` | {_cell(t)} | {_cell(d)} | {_cell(c)} |" for k, t, d, c in rows]
        out.append("")
    return "\n".join(out)


# -- metrics ------------------------------------------------------------------------------------------
def registered_help(packages: tuple[str, ...] = PRODUCER_PACKAGES) -> dict[str, tuple[str, str]]:
    """``metric name -> (help, file)`` from every call or tuple ``("oximeter_…" | "vllm:…", "help", …)``."""
    found: dict[str, tuple[str, str]] = {}
    for package in packages:
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
            for node in ast.walk(tree):
                # A constructor or helper call, or a table row such as (name, help, getter).
                items = node.args if isinstance(node, ast.Call) else \
                    node.elts if isinstance(node, ast.Tuple) else []
                if len(items) < 2:
                    continue
                name, doc = items[0], items[1]
                if (isinstance(name, ast.Constant) and isinstance(name.value, str)
                        and name.value.startswith(("oximeter_", "vllm:"))
                        and isinstance(doc, ast.Constant) and isinstance(doc.value, str)):
                    found.setdefault(name.value, (doc.value, str(path.relative_to(ROOT))))
    return found


def _help_for(name: str, kind: str, helps: Mapping[str, tuple[str, str]]) -> tuple[str, str]:
    # prometheus_client registers a counter without ``_total`` and adds it on exposition.
    candidates = [name, name.removesuffix("_total")] if kind == "counter" else [name]
    return next((helps[c] for c in candidates if c in helps), ("", ""))


def render_metrics() -> str:
    """The metric reference and the analyzer's signal catalogue."""
    from alert_rules import alerting_rules, load_catalogue
    from analyzer.signals.alert_limits import ALERT_LIMITS
    from analyzer.signals.catalogue import CATALOGUE
    from analyzer.signals.recording_rules import TEMPLATES_DIR

    helps = registered_help()
    out = ["# Metric reference", "",
           "<!-- Generated by `python scripts/gen_docs.py` from alert_rules/metric_catalogue.yml and the "
           "producers' code; do not edit. -->", "",
           "Every series Oximeter's rules, dashboards and analyzer may read (the contract in",
           "`alert_rules/metric_catalogue.yml`), with the help text its producer registers and where.",
           "Histograms are listed by family (`_bucket`, `_sum`, `_count` follow). Series scraped by",
           "Prometheus also carry `job` and `instance`.", ""]
    catalogue = load_catalogue()
    for producer in dict.fromkeys(m["producer"] for m in catalogue):
        out += [f"## {producer}", "", "| metric | type | labels | help | defined in |",
                "|---|---|---|---|---|"]
        for m in (m for m in catalogue if m["producer"] == producer):
            doc, where = _help_for(m["name"], m["type"], helps)
            if m.get("deprecated"):
                doc = f"(deprecated: read only as a fallback) {doc}".strip()
            labels = ", ".join(f"`{label}`" for label in m.get("labels") or []) or "—"
            out.append(f"| `{m['name']}` | {m['type']} | {labels} | {_cell(doc) or '—'} | "
                       f"{f'`{where}`' if where else '—'} |")
        out.append("")
    out += ["## Analyzer signals", "",
            "What the analyzer judges (`analyzer/signals/catalogue.py`; override or add under "
            "`analyzer.signals`).",
            "The query is the recording rule when Prometheus has it, else the raw PromQL fallback.", "",
            "| signal | layer | kind | entity | recording rule | description |", "|---|---|---|---|---|---|"]
    for spec in CATALOGUE.values():
        entity = ", ".join(spec.entity_labels)
        record = f"`{spec.record}`" if spec.record else "— (raw PromQL)"
        out.append(f"| `{spec.name}` | {spec.layer} | {spec.kind} | {entity} | {record} | "
                   f"{_cell(spec.description or '')} |")
    out += ["", "## Alert limits", "",
            "The limits of the alerts that judge no single signal (`analyzer/signals/alert_limits.py`; "
            "override under `analyzer.alert_limits`, then `oximeter rules build`).", "",
            "| limit | default | alerts |", "|---|---|---|"]
    rules = alerting_rules(TEMPLATES_DIR)
    for name, fields in ALERT_LIMITS.items():
        for field, number in fields.items():
            alerts = [rule["alert"] for rule in rules if f"[[{name}.{field}" in json.dumps(rule)]
            out.append(f"| `{name}.{field}` | {number:g} | {', '.join(alerts)} |")
    out.append("")
    return "\n".join(out)


# -- runbook ------------------------------------------------------------------------------------------
# A threshold the runbook's prose quotes is named by its configuration key, then its default:
# "`analyzer.signals.queue_wait_p99.threshold` (default 1 s)", or scaled, "`...min_traffic` / 5
# (default 10)". The default is rewritten from the code, so the prose cannot drift from it.
_QUOTED = re.compile(r"`(?P<key>[a-z][a-z0-9_]*(?:\.[a-z][a-z0-9_]*)+)`(?P<op>\s+[×/]\s+\d+(?:\.\d+)?)?"
                     r"\s+\(default\s+(?P<number>-?\d+(?:\.\d+)?)")


@functools.cache
def _alert_limits() -> dict[str, float]:
    from analyzer.signals.alert_limits import alert_limits

    return alert_limits()


@functools.cache
def _signal_limits() -> dict[str, float]:
    from analyzer.service.limits import limits

    return {k: v for k, v in limits().items() if k not in _alert_limits()}


@functools.cache
def _defaults() -> Any:
    from oximeter.config import config_model

    return config_model()()


def config_default(key: str) -> float:
    """The default of a configuration key that holds a number: a signal's limit
    (``analyzer.signals.NAME.FIELD``), a limit of an alert that judges no single signal
    (``analyzer.alert_limits.NAME.FIELD``), or any setting of a section."""
    section, _, name = key.partition(".")[2].partition(".")
    if key.startswith("analyzer.") and section in ("signals", "alert_limits"):
        # Each section's own limits: a signal's under signals, the others' under alert_limits.
        known = _signal_limits() if section == "signals" else _alert_limits()
        if name not in known:
            raise ValueError(f"{key} names no limit that analyzer.{section} sets")
        return known[name]
    value: Any = _defaults()  # every setting at its default
    for part in key.split("."):
        value = getattr(value, part, None)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{key} is no configuration key with a number for its default")
    return float(value)


def render_runbook(text: str) -> str:
    """``text`` with every quoted default rewritten from the code (``_QUOTED``)."""
    from oximeter.limits import number_text

    def fresh(match: re.Match[str]) -> str:
        number = config_default(match["key"])
        if match["op"]:
            sign, operand = match["op"].split()
            number = number * float(operand) if sign == "×" else number / float(operand)
        return match.group(0)[:match.start("number") - match.start(0)] + number_text(number)

    # A default quoted without its key (or with one the pattern misses) would never be refreshed.
    if (quoted := len(_QUOTED.findall(text))) != (said := len(re.findall(r"\(default\s", text))):
        raise ValueError(f"{said} defaults quoted, {quoted} of them after a `configuration.key`")
    return _QUOTED.sub(fresh, text)


# -- command ------------------------------------------------------------------------------------------
def outputs() -> dict[Path, str]:
    """Every generated file and its fresh content."""
    return {CONFIGURATION: render_configuration(), METRICS: render_metrics(),
            RUNBOOK: render_runbook(RUNBOOK.read_text(encoding="utf-8"))}


def stale(generated: Mapping[Path, str]) -> list[Path]:
    """The files whose content differs from ``generated`` (or that are missing)."""
    return [p for p, text in generated.items() if not p.exists() or p.read_text(encoding="utf-8") != text]


def main(argv: list[str] | None = None) -> int:
    """Write the generated docs, or with ``--check`` report the stale ones."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when a generated file is stale")
    args = parser.parse_args(argv)
    generated = outputs()
    if args.check:
        old = stale(generated)
        for path in old:
            print(f"stale: {path.relative_to(ROOT)} (run: python scripts/gen_docs.py)", file=sys.stderr)
        return 1 if old else 0
    for path, text in generated.items():
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
