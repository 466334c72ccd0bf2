"""Cached drill histories are keyed by the scenario and ``simulator.history.HISTORY_VERSION``, not
by the generator's source; this test is what keeps that key honest. It fingerprints the code a
history is generated from (``simulator/history.py`` and every module of ours it imports, as
syntax trees, so comments and formatting do not count) and pins the fingerprint to the version:
a change to the generator without a new version fails here, where the fix is one line, instead
of replaying stale cached histories in every drill.
"""

from __future__ import annotations

import ast
import hashlib
from pathlib import Path

from simulator.history import HISTORY_VERSION

ROOT = Path(__file__).resolve().parents[2]
ENTRY = ROOT / "simulator" / "history.py"
OURS = ("simulator", "gateway", "exporter", "oximeter")
# HISTORY_VERSION → the fingerprint of the generator's code at that version. Add a line with a new
# version; never edit an old one (a reviewer sees a changed line as a missing bump).
PINNED = {
    1: "56130c458da6fa67",
}


def generator_sources() -> list[Path]:
    """``simulator/history.py`` and every module of ours it imports, transitively."""
    seen: set[Path] = set()
    todo = [ENTRY]
    while todo:
        path = todo.pop()
        if path in seen or not path.is_file():
            continue
        seen.add(path)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level else []
            for name in names:
                if name.split(".")[0] in OURS:
                    base = ROOT.joinpath(*name.split("."))
                    todo += [base.with_suffix(".py"), base / "__init__.py"]
    return sorted(seen)


def fingerprint() -> str:
    """The generator's code as syntax trees (its version constant left out: bumping it is the fix)."""
    digest = hashlib.sha256()
    for path in generator_sources():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        if path == ENTRY:
            tree.body = [n for n in tree.body if not (isinstance(n, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "HISTORY_VERSION" for t in n.targets))]
        digest.update(str(path.relative_to(ROOT)).encode())
        digest.update(ast.dump(tree).encode())
    return digest.hexdigest()[:16]


def test_the_history_generator_version_matches_its_code() -> None:
    got = fingerprint()
    assert PINNED.get(HISTORY_VERSION) == got, (
        f"the history generator's code changed (fingerprint {got}): raise HISTORY_VERSION in "
        f"simulator/history.py and add {{<new version>: {got!r}}} "
        f"to PINNED in {Path(__file__).relative_to(ROOT)}, so no drill replays a stale cached history")


def test_versions_only_grow() -> None:
    assert max(PINNED) == HISTORY_VERSION and len(set(PINNED.values())) == len(PINNED)
