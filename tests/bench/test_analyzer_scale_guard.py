"""The analyzer's steady cycle stays as cheap as recorded: bench/analyzer_scale.py at a small fleet,
its steady cycle as a multiple of one copy of the frames it holds (both measured in the same run;
the comment above GUARD_LIMIT there says why that multiple holds on a loaded machine), within twice
the multiple recorded in bench/analyzer_scale_guard.json."""

from __future__ import annotations

from tests.script_module import load_script

bench = load_script("bench/analyzer_scale.py")


def test_the_steady_cycle_stays_within_twice_its_recorded_multiple_of_a_copy() -> None:
    ok, message = bench.check_guard()
    print(message)
    assert ok, message
