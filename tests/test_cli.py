"""The console script lists its subcommands with one-line descriptions."""

from __future__ import annotations

import subprocess

import pytest

from oximeter.cli import COMMANDS, build_parser
from stack.procs import oximeter_argv


def test_help_lists_every_subcommand() -> None:
    out = subprocess.run(oximeter_argv("--help"), capture_output=True, text=True, check=True).stdout
    flat = " ".join(out.split())  # argparse wraps long help lines
    for name, (_module, summary) in COMMANDS.items():
        assert f" {name} " in flat
        assert summary in flat


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_subcommand_module_configures(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    # In-process: importing each command module and printing its help is what matters here.
    with pytest.raises(SystemExit) as info:
        build_parser(name).parse_args([name, "--help"])
    assert info.value.code == 0
    assert "usage: oximeter" in capsys.readouterr().out
