"""The one YAML configuration file: read here, each section validated by the command that runs it.

Each component owns its section's model (``gateway/settings.py``, ``simulator/settings.py``, ...).
A command validates only its own sections (``load_section``), so ``oximeter gateway`` never
imports the analyzer's models; ``oximeter config check`` validates them all (``load_config``).
This module imports only the standard library, ``oximeter.errors`` and ``oximeter.inputs`` at
import time, so the gateway and the exporter, whose settings are plain dataclasses
(``oximeter/plain_settings.py``), read their section with ``read_config`` and never import
pydantic: it is imported only to validate a pydantic section, and PyYAML only to read a file
(a sidecar started without one never loads it).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import math
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

from oximeter.errors import ConfigError
from oximeter.inputs import MAX_DURATION_S, format_duration

if TYPE_CHECKING:
    from pydantic import BaseModel, ValidationError

DEFAULT_CONFIG_PATH = Path("oximeter.yaml")
_SECRET_HINT = re.compile(r"(url|password|secret|token|key|webhook)", re.IGNORECASE)

# section -> "module:Model". Imported only when that section is validated.
SECTIONS: dict[str, str] = {
    "gateway": "gateway.settings:GatewaySettings",
    "sim": "simulator.settings:SimSettings",
    "analyzer": "analyzer.service.settings:AnalyzerSettings",
    "incidents": "analyzer.incidents.settings:IncidentSettings",
    "topology": "analyzer.diagnosis.topology:TopologySettings",
    "exporter": "exporter.settings:ExporterSettings",
    "reporter": "reporter.settings:ReporterSettings",
    "slos": "analyzer.signals.slo:SloSettings",
}

M = TypeVar("M", bound="BaseModel")


def section_model(section: str) -> type[Any]:
    """The model class of ``section`` (imports its module)."""
    module_name, _, class_name = SECTIONS[section].partition(":")
    model: type[Any] = getattr(importlib.import_module(module_name), class_name)
    return model


@functools.cache
def config_model() -> type[BaseModel]:
    """The whole file's model, composed from every section's (for checks and the reference docs)."""
    from pydantic import ConfigDict, Field, create_model

    fields: dict[str, Any] = {
        name: (section_model(name), Field(default_factory=section_model(name))) for name in SECTIONS
    }
    model: type[BaseModel] = create_model(
        "OximeterConfig", __config__=ConfigDict(extra="forbid"),
        __doc__="The whole configuration; every option has a safe default.", **fields,
    )
    return model


def _describe(error: Any, prefix: tuple[str, ...] = ()) -> str:
    key = ".".join(str(part) for part in (*prefix, *error["loc"])) or "<root>"
    message = error["msg"]
    value = error.get("input")
    # Echo only short scalars, and never under a key that may hold a credential.
    unknown = error["type"] in ("extra_forbidden", "unexpected_keyword_argument")  # model, dataclass
    if (error["type"] != "missing" and not unknown and isinstance(value, (int, float, str, bool))
            and not _SECRET_HINT.search(key)):
        message += f" (got {repr(value)[:60]})"
    if unknown:
        message = "unknown key"
    return f"{key}: {message}"


def validation_problems(exc: ValidationError, *prefix: str) -> list[str]:
    """One line per problem of a pydantic ValidationError, its key prefixed by ``prefix``."""
    return [_describe(e, prefix) for e in exc.errors()]


def value_problems(value: Any, key: str = "") -> list[str]:
    """Values each model's own checks let through that would fail the process later: durations
    (a ``*_s`` key) that are infinite or beyond ``MAX_DURATION_S``, and URLs (a ``url`` or
    ``*_url`` key) without an http(s) scheme and a host. Walks models, dataclasses and lists."""
    name = re.sub(r"(\[\d+\])+$", "", key.rpartition(".")[2])
    if isinstance(value, bool):
        return []
    if isinstance(value, int | float) and name.endswith("_s"):
        if not math.isfinite(value) or abs(value) > MAX_DURATION_S:
            return [f"{key}: expected a duration of at most {format_duration(MAX_DURATION_S)} "
                    f"in seconds (got {value!r})"]
        return []
    if isinstance(value, str) and (name == "url" or name.endswith("_url")) and name != "redis_url" and value:
        try:
            parts = urlsplit(value)
            ok = parts.scheme in ("http", "https") and bool(parts.hostname)
        except ValueError:
            ok = False
        return [] if ok else [f"{key}: expected an http:// or https:// URL with a host"]
    if isinstance(value, list | tuple):
        return [p for i, item in enumerate(value) for p in value_problems(item, f"{key}[{i}]")]
    fields: dict[str, Any] = {}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    elif hasattr(type(value), "model_fields") and not isinstance(value, type):
        fields = {f: getattr(value, f) for f in type(value).model_fields}
    elif isinstance(value, dict):
        fields = {str(k): v for k, v in value.items()}
    return [p for field, item in fields.items()
            for p in value_problems(item, f"{key}.{field}" if key else field)]


def _check_sections(data: Any, path: str | None) -> dict[str, Any]:
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError([f"<root>: expected a mapping of sections, got {type(data).__name__}"], path)
    unknown = [f"{key}: unknown key" for key in data if key not in SECTIONS]
    if unknown:
        raise ConfigError(unknown, path)
    return data


def _read_yaml(path: str | Path | None) -> tuple[Any, str | None]:
    if path is None:
        if not DEFAULT_CONFIG_PATH.exists():
            return None, None
        path = DEFAULT_CONFIG_PATH
    where = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError([f"cannot read file: {exc.strerror}"], where) from None
    except UnicodeDecodeError as exc:
        raise ConfigError([f"not UTF-8 text (byte {exc.start}): save the file as UTF-8"], where) from None
    import yaml

    try:
        return yaml.safe_load(text), where
    except (ValueError, RecursionError) as exc:  # PyYAML's own checks, e.g. a date such as 2026-02-30
        raise ConfigError([f"invalid YAML: {exc}"], where) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError([f"{at}invalid YAML: {problem}"], where) from None


def read_config(path: str | Path | None = None) -> tuple[dict[str, Any], str | None]:
    """The file's sections, not yet validated, and the path read.

    ``path`` None: ``./oximeter.yaml`` when it exists, else no file (every section at its
    defaults; the path returned is then None). Unreadable files, invalid YAML and unknown
    sections raise ConfigError naming the file.
    """
    data, where = _read_yaml(path)
    return _check_sections(data, where), where


def section(sections: dict[str, Any], name: str, model: type[M], path: str | None = None) -> M:
    """Validate section ``name`` of already-read ``sections`` with its pydantic ``model``."""
    from pydantic import ValidationError

    data = sections.get(name)
    try:
        validated = model.model_validate({} if data is None else data)
    except ValidationError as exc:
        raise ConfigError(validation_problems(exc, name), path) from None
    if problems := value_problems(validated, name):
        raise ConfigError(problems, path)
    return validated


def load_section(name: str, model: type[M], path: str | Path | None = None) -> M:
    """Read the file and validate only section ``name``: what one command needs."""
    sections, where = read_config(path)
    return section(sections, name, model, where)


def parse_config(data: Any, path: str | None = None) -> Any:
    """Validate every section of already-parsed YAML ``data``; raise ConfigError listing every problem."""
    from pydantic import ValidationError

    if data is not None and not isinstance(data, dict):
        raise ConfigError([f"<root>: expected a mapping of sections, got {type(data).__name__}"], path)
    try:
        validated = config_model().model_validate(data or {})
    except ValidationError as exc:
        raise ConfigError(validation_problems(exc), path) from None
    if problems := value_problems(validated):
        raise ConfigError(problems, path)
    return validated


def load_config(path: str | Path | None = None) -> Any:
    """Read and validate the whole file (``oximeter config check``); imports every section's model."""
    data, where = _read_yaml(path)
    return parse_config(data, where)
