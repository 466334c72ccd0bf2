"""The exporter runs on a bare GPU host: it imports only its small set of dependencies."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import exporter

ALLOWED = {"prometheus_client", "pynvml", "psutil", "yaml", "redis", "exporter"}
# stdlib and PyYAML only
ALLOWED_OXIMETER = {"oximeter.errors", "oximeter.config", "oximeter.logs", "oximeter.ports", "oximeter.xids",
                    "oximeter.plain_settings", "oximeter.dcgm_fields"}
PACKAGE = Path(exporter.__file__).parent


def imported_modules(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
    return found


def test_only_allowed_imports() -> None:
    files = sorted(PACKAGE.rglob("*.py"))
    assert len(files) >= 12
    for path in files:
        for module in imported_modules(path):
            top = module.split(".")[0]
            if module == "__future__" or top in sys.stdlib_module_names or top in ALLOWED:
                continue
            assert module in ALLOWED_OXIMETER, f"{path.relative_to(PACKAGE)} imports {module}"


def test_nothing_heavy_is_loaded_at_run_time() -> None:
    code = ("import sys, exporter.cli, exporter.backends.sim, exporter.backends.nvml\n"
            "heavy = ('pydantic', 'loguru', 'requests', 'aiohttp', 'pandas', 'numpy', 'redis', 'pynvml')\n"
            "print(sorted(m for m in heavy if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         timeout=60).stdout
    assert out.strip() == "[]"  # redis and pynvml only when a queue or the NVML backend is used
