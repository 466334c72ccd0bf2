"""``oximeter drill --replay --incremental``: a library drill through the daemon's own incremental
detection (live window, same-time windows, baselines for new rows only, every cycle) opens the
incident the whole-history replay opens, at the same time, named the same way."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest

from drills.cli import DEFAULT_CACHE
from oximeter.cli import main
from stack.procs import oximeter_argv

COLD_TIMEOUT_S = 1800


def _drill(*extra: str) -> dict[str, Any]:
    argv = oximeter_argv("drill", "xid_critical", "--replay", "--json", "--cache", str(DEFAULT_CACHE), *extra)
    result = subprocess.run(argv, capture_output=True, text=True, timeout=COLD_TIMEOUT_S, check=False)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    (drill,) = json.loads(result.stdout)["drills"]
    return dict(drill)


@pytest.mark.timeout(COLD_TIMEOUT_S)
def test_a_drill_through_the_daemons_incremental_loop_opens_what_the_whole_history_replay_opens() -> None:
    whole, loop = _drill(), _drill("--incremental")
    assert whole["passed"] and loop["passed"], loop

    def named(drill: dict[str, Any]) -> list[tuple[str, str, str, str, str]]:
        return [(a["incident_id"], a["layer"], a["rule"], a["signal"], a["opened_at"])
                for a in drill["attributed"]]

    assert named(loop) == named(whole) != []
    assert loop["messages"] == whole["messages"]


def test_incremental_is_refused_with_shards(capsys: pytest.CaptureFixture[str]) -> None:
    # Refused while checking the arguments, before anything is replayed: in process.
    assert main(["drill", "xid_critical", "--replay", "--incremental", "--shard", 'node="n1"']) == 2
    err = capsys.readouterr().err
    assert "--incremental" in err and "--shard" in err
