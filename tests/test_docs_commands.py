"""The commands README.md and docs/*.md show are commands that work.

Runnable examples are fenced ``console`` blocks: each ``$ `` line is run from the repository root
(``oximeter`` and ``python`` only: this interpreter), must exit 0, and every line shown below it
must be a line of what it printed. Every other ``oximeter …`` the prose names in backticks must
at least parse: its command exists and its options are that command's.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from oximeter.cli import _chosen_command, build_parser

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_CONSOLE = re.compile(r"^```console\n(.*?)^```", re.DOTALL | re.MULTILINE)
_INLINE = re.compile(r"`(oximeter [^`]*)`")
# Placeholders the prose writes in capitals, and the value each one parses as.
PLACEHOLDERS = {"YYYY-MM-DD": "2026-01-02"}


def console_examples(text: str) -> list[tuple[str, list[str]]]:
    """Each ``$ command`` of the text's console blocks with the output lines shown below it."""
    found: list[tuple[str, list[str]]] = []
    for block in _CONSOLE.findall(text):
        for line in block.splitlines():
            if line.startswith("$ "):
                found.append((line[2:].strip(), []))
            elif line.strip() and found:
                found[-1][1].append(line.rstrip())
    return found


def _examples() -> dict[str, list[str]]:
    """Every runnable command once (the output shown, from all places that show it)."""
    runs: dict[str, list[str]] = {}
    for doc in DOCS:
        for command, shown in console_examples(doc.read_text()):
            runs.setdefault(command, []).extend(shown)
    return runs


def mentioned_argvs(text: str) -> list[list[str]]:
    """The argv of every ``oximeter …`` in backticks, alternatives (``a|b``, ``[--x]``) spelled out."""
    argvs: list[list[str]] = []
    for mention in _INLINE.findall(text):
        words = [w for w in mention.replace("\\|", "|").split()[1:] if w != "…"]
        choices = []
        for word in words:
            if word.startswith("[") and word.endswith("]"):
                choices.append(["", word[1:-1]])
            else:
                choices.append([PLACEHOLDERS.get(w, w) for w in word.split("|")])
        argvs += [[w for w in combo if w] for combo in itertools.product(*choices)]
    return argvs


RUNS = _examples()


def test_the_docs_show_runnable_examples() -> None:
    assert len(RUNS) >= 3, RUNS


@pytest.mark.parametrize("command", sorted(RUNS))
def test_runnable_command(command: str) -> None:
    argv = shlex.split(command)
    program = {"oximeter": [sys.executable, "-m", "oximeter"], "python": [sys.executable]}
    assert argv[0] in program, f"a runnable example runs oximeter or python, not {argv[0]}"
    done = subprocess.run(program[argv[0]] + argv[1:], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    printed = {line.rstrip() for line in (done.stdout + done.stderr).splitlines()}
    assert [line for line in RUNS[command] if line not in printed] == []


def _parse_error(argv: list[str]) -> str | None:
    """What argparse says against ``oximeter argv``; None when it parses or only lacks an argument
    (prose may name a command without its arguments)."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()), \
            contextlib.suppress(SystemExit):
        build_parser(_chosen_command(argv)).parse_args(argv)
    message = err.getvalue()
    if not message or "the following arguments are required" in message:
        return None
    return message.strip().splitlines()[-1]


def test_every_command_the_docs_name_parses() -> None:
    argvs = [(doc.name, argv) for doc in DOCS for argv in mentioned_argvs(doc.read_text())]
    assert len(argvs) >= 20
    failures = {(name, " ".join(argv)): _parse_error(argv) for name, argv in argvs}
    assert {k: v for k, v in failures.items() if v} == {}


@pytest.mark.parametrize(("text", "expected"), [
    ("```console\n$ oximeter --help\n$ oximeter config check f.yaml\nf.yaml: ok\n```\n",
     [("oximeter --help", []), ("oximeter config check f.yaml", ["f.yaml: ok"])]),
    ("```sh\n$ make demo\n```\n", []),
])
def test_console_examples(text: str, expected: list[tuple[str, list[str]]]) -> None:
    assert console_examples(text) == expected


@pytest.mark.parametrize(("text", "expected"), [
    ("run `oximeter sim serve\\|fault` or `oximeter rules build [--check]`",
     [["sim", "serve"], ["sim", "fault"], ["rules", "build"], ["rules", "build", "--check"]]),
    ("`oximeter report --date YYYY-MM-DD` and `oximeter sim fault …`",
     [["report", "--date", "2026-01-02"], ["sim", "fault"]]),
])
def test_mentioned_argvs(text: str, expected: list[list[str]]) -> None:
    assert mentioned_argvs(text) == expected


def test_a_wrong_option_is_caught() -> None:
    assert "unrecognized arguments: --config" in str(_parse_error(["config", "check", "--config", "FILE"]))
    assert _parse_error(["config", "check", "FILE"]) is None
