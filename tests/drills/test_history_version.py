"""Cached drill histories are keyed by the scenario and ``simulator.history.HISTORY_VERSION``, not
by the generator's source; this test is what keeps that key honest. It fingerprints the code a
history is generated from (``simulator/history.py`` and every module of ours it imports, as
syntax trees, so comments and formatting do not count) and looks the fingerprint up in a table
of the versions: a change to the generator fails here until its author says which version its
output belongs to, one line, instead of drills replaying stale cached histories. A change that
cannot alter what a scenario yields (a refactor, a new option off by default) keeps the version,
so nobody regenerates every history for it.
"""

from __future__ import annotations

import ast
import hashlib
from pathlib import Path

from simulator.history import HISTORY_VERSION

ROOT = Path(__file__).resolve().parents[2]
ENTRY = ROOT / "simulator" / "history.py"
OURS = ("simulator", "gateway", "exporter", "oximeter")
# The generator's code (fingerprint) -> the HISTORY_VERSION whose output it yields. Only ever add
# lines: the table shows a reviewer every change and whether it was judged to alter the output.
PINNED = {
    "56130c458da6fa67": 1,
    "10f6d65501eb510a": 1,  # replaying recorded requests, only when given
    "afc71d7c45180b72": 1,  # a field's description reworded
    "7e61b463d9947358": 1,  # cheaper sampling and fault lookups, byte-identical histories
    "2bde48d1f0f7dd38": 1,  # fewer calls per sample, byte-identical histories
    "478941b38c610548": 1,  # both of the above together
    "e75de1353d13dd53": 1,  # one Sample constructor, one day length: byte-identical histories
    "2cc0169c8a81e63b": 1,  # the exporter's settings type checks moved to a shared module
    "1d019ffaf1a72085": 1,  # the exporter's settings loaded and type-checked by the shared module
    "36c0ff9ab4916bb8": 1,  # JSON, time and config-value checks beside the parsers it uses; same histories
    "f2c105c346cc9173": 1,  # the day's shape and the request mix moved, verbatim, to their own module
    "453c013935fdd541": 2,  # stock fleets: dcgm-exporter's real Xid series, FB_RESERVED, replicas unavailable
    "80ff9a3ea01cd70f": 2,  # engine_oom and crash_loop faults; kube-state-metrics' last terminated reason
    "14c39d5c4c649aca": 2,  # the above with the wiring moved out and the input checks: same histories
    "011a9189d91daec3": 2,  # maintenance windows a scenario may declare (none by default): same histories
    "be72d7642df1fb4b": 1,  # a scenario's maintenance windows, told to the analyzer, not simulated
    "5d1aaad9dcca8408": 3,  # the gateway's oldest-wait gauges; unserved queue waits observed
    "569c090ff1fbe6cf": 3,  # the above merged with the on-call side and the faster analyzer: same histories
    "70df6b062104c93b": 3,  # the store error moved to the core errors module: same histories
    "63d4557371d8cde7": 3,  # the gateway tells a stream's closing [DONE] apart: same histories
    "35e9dcc10186801b": 2,  # the store's error class moved to the shared errors module: same histories
    "6025cf81b289c0ef": 3,  # a docstring names the diagnosis rules' new path: same histories
    "f95fed085af197a6": 3,  # the dcgm-exporter field table moved to the core: same histories
    "69c588e6d254a806": 3,  # fault kinds' effects from one registry, one defaults module: same histories
    "9537e5193ec65202": 3,  # both of the above merged: same histories
    "ac58da7ff50d2cc2": 3,  # the field table in the core and the fault-kind registry together: same histories
    "f41c70fcd4c1b6d1": 4,  # vLLM's cache_config_info; stock: cAdvisor engine memory, node memory capacity
    "14ea111acc965f33": 4,  # a scenario's truth may name restart_loop and node_not_ready: same histories
    "95d6b74b048ff635": 4,  # the above merged with the analyzer's stage packages: same histories
    "2b6c339303e9ed9a": 4,  # the above with the fault-kind registry and the core field table
    "3bf54b4b47d7083d": 5,  # vllm:cache_config_info labelled as a real vLLM 0.32.0 engine labels it
    "984ca80dab893f70": 5,  # the simulated fleets' gateway limits named once: same histories
    "de8d5bcf1733a77c": 5,  # engine_stall named engine_hung; the exporter's GPU-less backend: same histories
    "6f01fab6e6797c34": 5,  # the engine knobs declared once for sim serve and scenarios: same histories
}


def generator_trees() -> dict[Path, ast.Module]:
    """``simulator/history.py`` and every module of ours it imports, transitively, parsed."""
    trees: dict[Path, ast.Module] = {}
    todo = [ENTRY]
    while todo:
        path = todo.pop()
        if path in trees or not path.is_file():
            continue
        trees[path] = tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level else []
            for name in names:
                if name.split(".")[0] in OURS:
                    base = ROOT.joinpath(*name.split("."))
                    todo += [base.with_suffix(".py"), base / "__init__.py"]
    return trees


def fingerprint() -> str:
    """The generator's code as syntax trees (its version constant left out: setting it is the fix)."""
    digest = hashlib.sha256()
    for path, tree in sorted(generator_trees().items()):
        if path == ENTRY:
            tree.body = [n for n in tree.body if not (isinstance(n, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "HISTORY_VERSION" for t in n.targets))]
        digest.update(str(path.relative_to(ROOT)).encode())
        digest.update(ast.dump(tree).encode())
    return digest.hexdigest()[:16]


def test_the_history_generator_version_matches_its_code() -> None:
    got = fingerprint()
    assert PINNED.get(got) == HISTORY_VERSION, (
        f"the history generator's code changed (fingerprint {got}): if what a scenario yields may "
        "differ, raise HISTORY_VERSION in simulator/history.py, so that no drill replays a stale "
        f"cached history; then add {got!r}: <HISTORY_VERSION> to PINNED in "
        f"{Path(__file__).relative_to(ROOT)}")


def test_the_version_is_the_newest_pinned() -> None:
    assert max(PINNED.values()) == HISTORY_VERSION
