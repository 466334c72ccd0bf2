"""The console script lists its subcommands with one-line descriptions."""

from __future__ import annotations

import subprocess

from oximeter.cli import COMMANDS
from oximeter.procs import oximeter_argv


def test_help_lists_every_subcommand() -> None:
    out = subprocess.run(oximeter_argv("--help"), capture_output=True, text=True, check=True).stdout
    for name, (_module, summary) in COMMANDS.items():
        assert name in out
        assert summary in out


def test_every_subcommand_module_configures() -> None:
    for name in COMMANDS:
        result = subprocess.run(oximeter_argv(name, "--help"), capture_output=True, text=True)
        assert result.returncode == 0, (name, result.stderr)
