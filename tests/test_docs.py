"""The generated docs (scripts/gen_docs.py) are fresh, and the generator reads the schema right."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, Field

from tests.script_module import load_script

ROOT = Path(__file__).resolve().parent.parent
gen_docs = load_script("scripts/gen_docs.py")


def test_generated_docs_are_fresh() -> None:
    # Regenerated in memory: a changed setting, metric or signal without `python scripts/gen_docs.py`.
    assert [str(p.relative_to(ROOT)) for p in gen_docs.stale(gen_docs.outputs())] == []


def test_every_configuration_key_has_a_description() -> None:
    # A key's description is its Field's description, else the comment beside or above it in its
    # settings model: an undescribed key renders an empty cell in docs/configuration.md.
    undescribed = [key for _, _, _, rows in gen_docs.config_sections()
                   for key, _, _, description in rows if not description.strip()]
    assert undescribed == []


def test_stale_names_changed_and_missing_files(tmp_path: Path) -> None:
    same, changed, missing = tmp_path / "same.md", tmp_path / "changed.md", tmp_path / "missing.md"
    same.write_text("a\n")
    changed.write_text("old\n")
    assert gen_docs.stale({same: "a\n", changed: "new\n", missing: "x"}) == [changed, missing]


@pytest.mark.parametrize(("quoted", "fresh"), [
    # A signal's limit, scaled; an alert's limit; any other setting: each default from the code.
    ("above `analyzer.signals.queue_wait_p99.threshold` (default 7 s) with",
     "above `analyzer.signals.queue_wait_p99.threshold` (default 1 s) with"),
    ("`analyzer.signals.queue_wait_p99.min_traffic` / 5\n(default 3) waits",
     "`analyzer.signals.queue_wait_p99.min_traffic` / 5\n(default 10) waits"),
    ("`analyzer.signals.external_queue_growth.threshold` × 60 (default 1)",
     "`analyzer.signals.external_queue_growth.threshold` × 60 (default 6)"),
    ("`analyzer.alert_limits.gpu_memory_full.threshold` (default 0.5)",
     "`analyzer.alert_limits.gpu_memory_full.threshold` (default 0.99)"),
    ("`slos.page_fast_burn` (default 2)", "`slos.page_fast_burn` (default 14.4)"),
    ("`incidents.gpu_util_low` (default 0.9)", "`incidents.gpu_util_low` (default 0.5)"),
    ("`incidents.gpu_util_low` without a default stays", "`incidents.gpu_util_low` without a default stays"),
])
def test_the_runbook_quotes_each_threshold_at_its_default(quoted: str, fresh: str) -> None:
    assert gen_docs.render_runbook(quoted) == fresh


@pytest.mark.parametrize("key", ["analyzer.signals.queue_wait_p99.ceiling",
                                 "analyzer.alert_limits.nope.threshold", "incidents.store_path",
                                 "incidents.no_such_key",
                                 # A limit under the other section than the one that sets it.
                                 "analyzer.alert_limits.queue_wait_p99.threshold",
                                 "analyzer.signals.gpu_memory_full.threshold"])
def test_a_quoted_key_that_sets_no_number_fails_the_docs(key: str) -> None:
    with pytest.raises(ValueError, match=key):
        gen_docs.render_runbook(f"`{key}` (default 1)")


@pytest.mark.parametrize(("prop", "expected"), [
    ({"type": "integer", "minimum": 1, "maximum": 65535}, ("integer", "≥ 1, ≤ 65535")),
    ({"type": "number", "exclusiveMinimum": 0}, ("number", "> 0")),
    ({"anyOf": [{"type": "string"}, {"type": "null"}]}, ("string or null", "")),
    ({"type": "array", "items": {"type": "string"}, "minItems": 1}, ("list of string", "min items 1")),
    ({"type": "object", "additionalProperties": {"$ref": "#/$defs/ChannelSettings"}},
     ("map of ChannelSettings", "")),
    ({"enum": ["wecom", "slack"]}, ('"wecom" | "slack"', "")),
    ({"$ref": "#/$defs/DigestSettings"}, ("DigestSettings", "")),
])
def test_type_and_constraints(prop: dict[str, Any], expected: tuple[str, str]) -> None:
    assert (gen_docs.type_text(prop), gen_docs.constraint_text(prop)) == expected


@pytest.mark.parametrize(("prop", "required", "expected"), [
    ({"default": 0.5}, False, "`0.5`"),
    ({"default": None}, False, "`null`"),
    ({"default": "127.0.0.1"}, False, '`"127.0.0.1"`'),
    ({"default": {"url": "x"}, "$ref": "#/$defs/PrometheusSettings"}, False, "(section)"),
    ({}, True, "(required)"),
    ({}, False, "(empty)"),
])
def test_default_text(prop: dict[str, Any], required: bool, expected: str) -> None:
    assert gen_docs.default_text(prop, required) == expected


class _Inner(BaseModel):
    """Inner section."""

    depth_s: float = Field(2.0, gt=0)  # how deep


class _Outer(BaseModel):
    """Outer section."""

    # Above the field,
    # on two lines.
    name: str = "x"
    inner: _Inner = _Inner()
    tags: list[str] = Field(default_factory=lambda: ["a"])
    described: int = Field(3, description="from the field")


def test_config_rows_walk_nested_models_with_comments_and_factories() -> None:
    schema = _Outer.model_json_schema()
    models = gen_docs.models_of(_Outer)
    assert list(gen_docs.config_rows("_Outer", {**schema, "$defs": {**schema["$defs"], "_Outer": schema}},
                                     "outer", models)) == [
        ("outer.name", "string", '`"x"`', "Above the field, on two lines."),
        ("outer.inner", "_Inner", "(section)", ""),
        ("outer.inner.depth_s", "number (> 0)", "`2.0`", "how deep"),
        ("outer.tags", "list of string", '`["a"]`', ""),
        ("outer.described", "integer", "`3`", "from the field"),
    ]


def test_every_metric_our_code_produces_has_its_help_text() -> None:
    from alert_rules import load_catalogue

    helps = gen_docs.registered_help()
    ours = [m for m in load_catalogue()
            if m["producer"] in gen_docs.PRODUCER_PACKAGES and not m.get("deprecated")]
    assert [m["name"] for m in ours if not gen_docs._help_for(m["name"], m["type"], helps)[0]] == []


def test_a_default_quoted_without_its_key_fails_the_docs() -> None:
    with pytest.raises(ValueError, match="2 defaults quoted, 1 of them"):
        gen_docs.render_runbook("`slos.ticket_burn` (default 1) and a bare limit (default 5)")
