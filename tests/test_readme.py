"""The README opens with the two commands, and its configuration example is valid."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from oximeter.config import parse_config

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_starts_with_the_two_commands() -> None:
    first_block = README.read_text().split("```")[1]
    commands = [line.split("#")[0].strip() for line in first_block.splitlines()[1:] if line.strip()]
    assert commands == ["make demo", "make test"]


def test_readme_yaml_examples_are_valid_config() -> None:
    blocks = re.findall(r"```yaml\n(.*?)```", README.read_text(), flags=re.DOTALL)
    assert blocks, "the README should show a configuration example"
    for block in blocks:
        config = parse_config(yaml.safe_load(block), "README.md")
        for name in config.analyzer.signals:
            assert name in config.analyzer.catalogue()
