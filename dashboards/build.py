"""Load the grafanalib sources (``<name>.dashboard.py``) and write Grafana JSON with sorted keys.

A threshold a source names as a catalogue limit (``panels.limit``) is written with the number the
caller gives: the analyzer's catalogue with the configuration's overrides (``oximeter dashboards
build``), so the shipped JSON and a deployment's own carry the limits the analyzer judges by.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from grafanalib._gen import DashboardEncoder
from grafanalib.core import Dashboard

from oximeter.errors import OximeterError
from oximeter.limits import fill_data

SOURCE_DIR = Path(__file__).resolve().parent
BUILD_DIR = SOURCE_DIR / "build"
SOURCE_SUFFIX = ".dashboard.py"


class DashboardSourceError(OximeterError):
    """A dashboard source failed to load or defines no ``dashboard``."""


def sources(source_dir: Path = SOURCE_DIR) -> list[Path]:
    """Every ``*.dashboard.py`` in ``source_dir``, sorted by name."""
    return sorted(source_dir.glob(f"*{SOURCE_SUFFIX}"))


def output_name(source: Path) -> str:
    """``overview.dashboard.py`` -> ``overview.json``."""
    return source.name[: -len(SOURCE_SUFFIX)] + ".json"


def load_dashboard(source: Path) -> Dashboard:
    """Execute one source file and return its module-level ``dashboard``."""
    # The file name has two dots, so it cannot be imported by name; load it from its path.
    spec = importlib.util.spec_from_file_location(f"dashboards._src_{source.stem.replace('.', '_')}", source)
    if spec is None or spec.loader is None:
        raise DashboardSourceError(f"{source}: cannot load")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    dashboard = getattr(module, "dashboard", None)
    if not isinstance(dashboard, Dashboard):
        raise DashboardSourceError(f"{source}: defines no grafanalib Dashboard named 'dashboard'")
    return dashboard


def to_json_data(dashboard: Dashboard, limits: Mapping[str, float]) -> dict[str, Any]:
    """The dashboard as plain JSON data (what Grafana's provisioning reads), its catalogue limits
    filled in from ``limits`` (``{"queue_wait_p99.threshold": 1.0, ...}``)."""
    data = json.loads(json.dumps(dashboard.to_json_data(), cls=DashboardEncoder))
    filled: dict[str, Any] = fill_data(data, limits, f"dashboard {dashboard.uid}")
    return filled


def render(dashboard: Dashboard, limits: Mapping[str, float]) -> str:
    """Grafana JSON text: sorted keys and two-space indent, so diffs of generated files read well."""
    return json.dumps(to_json_data(dashboard, limits), sort_keys=True, indent=2, ensure_ascii=False) + "\n"


def build_all(limits: Mapping[str, float], out_dir: Path = BUILD_DIR,
              source_dir: Path = SOURCE_DIR) -> dict[Path, str]:
    """Render every source; returns {output path: JSON text} without writing."""
    return {out_dir / output_name(src): render(load_dashboard(src), limits) for src in sources(source_dir)}


def write_all(limits: Mapping[str, float], out_dir: Path = BUILD_DIR,
              source_dir: Path = SOURCE_DIR) -> list[Path]:
    """Render every source into ``out_dir``; returns the files written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for path, text in build_all(limits, out_dir, source_dir).items():
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


def load_built(build_dir: Path = BUILD_DIR) -> dict[str, dict[str, Any]]:
    """The committed JSON dashboards by file name (what Grafana is provisioned with)."""
    return {p.name: json.loads(p.read_text(encoding="utf-8")) for p in sorted(build_dir.glob("*.json"))}
