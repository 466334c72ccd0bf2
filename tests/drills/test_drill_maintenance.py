"""A drill that declares a maintenance window over its fault's node: the incident opens suppressed
and chat hears nothing; the same drill without the window sends its usual messages. Both replay
the library's cached Xid history (the window is not part of what a history is generated from)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from drills.cli import DEFAULT_CACHE, LIBRARY
from stack.procs import oximeter_argv

COLD_TIMEOUT_S = 1800


@pytest.mark.timeout(COLD_TIMEOUT_S)
def test_a_maintenance_window_over_the_fault_suppresses_its_incident(tmp_path: Path) -> None:
    plain = yaml.safe_load((LIBRARY / "xid_critical.yaml").read_text())
    (fault,) = plain["faults"]
    (tmp_path / "xid_critical.yaml").write_text(yaml.safe_dump(plain))
    # From an hour before the fault to the end of the history: the fault and its resolve inside it.
    window = {"node": fault["node"], "start": "-3h", "duration": "3h", "reason": "driver upgrade"}
    (tmp_path / "xid_in_maintenance.yaml").write_text(yaml.safe_dump(
        {**plain, "name": "xid_in_maintenance", "maintenance": [window]}))
    argv = oximeter_argv("drill", "--all", "--scenarios", str(tmp_path), "--replay", "--json",
                         "--cache", str(DEFAULT_CACHE))
    result = subprocess.run(argv,
                            capture_output=True, text=True, timeout=COLD_TIMEOUT_S, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    drills = {d["scenario"]: d for d in json.loads(result.stdout)["drills"]}
    usual, quiet = drills["xid_critical"], drills["xid_in_maintenance"]
    print(f"without the window: {usual['messages']} messages; with it: {quiet['messages']} messages, "
          f"{quiet['suppressed']} incident(s) suppressed")
    # The same incident, named right both times: detection went on under the window.
    assert [a["incident_id"] for a in quiet["attributed"]] == [a["incident_id"] for a in usual["attributed"]]
    assert usual["passed"] and quiet["passed"]
    assert usual["messages"] >= 1 and "suppressed" not in usual
    assert (quiet["messages"], quiet["suppressed"]) == (0, 1)
