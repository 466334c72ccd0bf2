"""The one YAML configuration file, validated at start-up.

Each component owns its section's model (``gateway/settings.py``, ``simulator/settings.py``, ...);
this module composes them and turns every validation problem into a line naming the file and key.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from analyzer.incidents import IncidentSettings
from analyzer.settings import AnalyzerSettings
from analyzer.topology import TopologySettings
from exporter.settings import ExporterSettings
from gateway.settings import GatewaySettings
from oximeter.errors import ConfigError
from reporter.settings import ReporterSettings
from simulator.settings import SimSettings

DEFAULT_CONFIG_PATH = Path("oximeter.yaml")
_SECRET_HINT = re.compile(r"(url|password|secret|token|key|webhook)", re.IGNORECASE)


class OximeterConfig(BaseModel):
    """The whole configuration; every option has a safe default."""

    model_config = ConfigDict(extra="forbid")

    gateway: GatewaySettings = GatewaySettings()
    sim: SimSettings = SimSettings()
    analyzer: AnalyzerSettings = AnalyzerSettings()
    incidents: IncidentSettings = IncidentSettings()
    topology: TopologySettings = TopologySettings()
    exporter: ExporterSettings = ExporterSettings()
    reporter: ReporterSettings = ReporterSettings()


def _describe(error: Any) -> str:
    key = ".".join(str(part) for part in error["loc"]) or "<root>"
    message = error["msg"]
    value = error.get("input")
    # Echo only short scalars, and never under a key that may hold a credential.
    if (error["type"] not in ("missing", "extra_forbidden") and isinstance(value, (int, float, str, bool))
            and not _SECRET_HINT.search(key)):
        message += f" (got {repr(value)[:60]})"
    if error["type"] == "extra_forbidden":
        message = "unknown key"
    return f"{key}: {message}"


def parse_config(data: Any, path: str | None = None) -> OximeterConfig:
    """Validate already-parsed YAML ``data``; raise ConfigError listing every problem."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError([f"<root>: expected a mapping of sections, got {type(data).__name__}"], path)
    try:
        return OximeterConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError([_describe(e) for e in exc.errors()], path) from None


def load_config(path: str | Path | None = None) -> OximeterConfig:
    """Load ``path`` (or ``oximeter.yaml`` when it exists, else the defaults)."""
    if path is None:
        if not DEFAULT_CONFIG_PATH.exists():
            return OximeterConfig()
        path = DEFAULT_CONFIG_PATH
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError([f"cannot read file: {exc.strerror}"], str(path)) from None
    except UnicodeDecodeError as exc:
        raise ConfigError([f"not UTF-8 text (byte {exc.start}): save the file as UTF-8"], str(path)) from None
    try:
        data = yaml.safe_load(text)
    except (ValueError, RecursionError) as exc:  # PyYAML's own checks, e.g. a date such as 2026-02-30
        raise ConfigError([f"invalid YAML: {exc}"], str(path)) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError([f"{where}invalid YAML: {problem}"], str(path)) from None
    return parse_config(data, str(path))
