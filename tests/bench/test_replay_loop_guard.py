"""Replaying through the daemon's own incremental loop stays as cheap as recorded, relative to
today's replay: bench/replay_loop.py on its small synthetic fleet, the incremental replay's CPU
seconds as a multiple of the replay that detects once over the whole history (both measured in
the same run, so a loaded machine moves both), within twice the multiple recorded in
bench/replay_loop_guard.json."""

from __future__ import annotations

from tests.script_module import load_script

bench = load_script("bench/replay_loop.py")


def test_the_incremental_replay_stays_within_twice_its_recorded_multiple_of_the_whole_replay() -> None:
    ok, message = bench.check_guard()
    print(message)
    assert ok, message
