"""The import contracts in pyproject.toml hold: layers, the light processes, no cycles in a package."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
MAX_EXCEPTIONS = 3
LAYERS = next(c["layers"] for c in PYPROJECT["tool"]["importlinter"]["contracts"] if c["type"] == "layers")


def test_import_contracts_are_kept() -> None:
    lint = Path(sys.executable).parent / "lint-imports"
    done = subprocess.run([str(lint), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


def test_few_exceptions_and_every_package_in_the_layers() -> None:
    config = PYPROJECT["tool"]["importlinter"]
    exceptions = {i for c in config["contracts"] for i in c.get("ignore_imports", [])}
    assert len(exceptions) <= MAX_EXCEPTIONS, sorted(exceptions)
    in_layers = {name.strip() for layer in LAYERS for name in layer.split("|")}
    packages = set(config["root_packages"])
    assert in_layers == packages
    # Every top-level package the wheel ships is one the contracts see.
    shipped = {p.rstrip("*") for p in PYPROJECT["tool"]["setuptools"]["packages"]["find"]["include"]}
    assert shipped == packages


def test_the_architecture_page_draws_the_layers_of_the_contract() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text()
    picture = text.split("## Packages and their layers", 1)[1].split("```")[1]
    rows = [re.split(r"\s{2,}", line.strip())[0] for line in picture.splitlines() if re.match(r"^  \S", line)]
    assert [row.replace(" │ ", " | ") for row in rows] == LAYERS
