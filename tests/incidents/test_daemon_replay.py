"""``oximeter analyze --replay DIR``: simulator history replayed through the same live pipeline
(SignalCycles over a frame source) opens the scenario's incident, with its layer, rule and entity."""

from __future__ import annotations

import argparse
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path

from analyzer.incidents.model import Incident
from analyzer.incidents.store import IncidentQuery, IncidentStore
from analyzer.service.analyze_cmd import AnalyzeConfig, _source
from oximeter.store import connect
from stack.procs import oximeter_argv

END_S = 1767808800  # 2026-01-07T18:00:00Z
SCENARIO = """\
name: replay_xid
description: a paging Xid on n1 GPU 1
nodes: 1
gpus_per_node: 2
faults:
  - {kind: xid, node: n1, gpu: 1, start: -30m, duration: 10m, strength: 79}
truth: {layer: infrastructure, entity: {node: n1, gpu: "1"}, rule: xid_critical}
"""


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    # No limit of its own: the suite's per-test limit bounds it (a loaded machine is slower).
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False)


def _replayed_incident(where: Path, scenario: str, *flags: str) -> Incident:
    """The one incident ``oximeter analyze --replay --once`` (with ``flags``) opens at 17:38 on the
    scenario's history (the Xid came at 17:30: the live hour holds it, cleared under 10 min ago)."""
    (where / "scenario.yaml").write_text(scenario)
    made = _run(oximeter_argv("sim", "history", "--scenario", "scenario.yaml", "--days", "0.05",
                              "--step", "15s", "--out", "history", "--end", str(END_S)), where)
    assert made.returncode == 0, made.stderr[-2000:]
    ran = _run(oximeter_argv("analyze", "--replay", "history", *flags, "--once", "--replay-start",
                             "2026-01-07T17:38:00Z", "--store", "oximeter.db"), where)
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-2000:]
    store = IncidentStore(connect(where / "oximeter.db"))
    try:
        (incident,) = store.query(IncidentQuery(), datetime.fromtimestamp(END_S, UTC))
    finally:
        store.conn.close()
    return incident


def test_replay_once_opens_the_scenario_incident(tmp_path: Path) -> None:
    incident = _replayed_incident(tmp_path, SCENARIO)
    # The card fell off the bus, yet its node's answers spend no error budget: a ticket, not a page.
    assert (incident.state, incident.layer, incident.rule, incident.severity) == (
        "open", "infrastructure", "xid_critical", "warning")
    assert incident.root_cause.signal == "xid_paging"
    assert {k: v for k, v in incident.root_cause.labels if k in ("node", "gpu", "xid")} == {
        "node": "n1", "gpu": "1", "xid": "79"}
    assert incident.first_onset == datetime(2026, 1, 7, 17, 30, tzinfo=UTC)

    # The one cycle is at --replay-start however long the set-up took (at the replay's 60 × a
    # loaded machine's 20 s of imports moved it 20 minutes on, past the Xid).
    args = argparse.Namespace(once=True, replay=str(tmp_path / "history"), signals=None, speed=60.0,
                              replay_start=datetime(2026, 1, 7, 17, 38, tzinfo=UTC))
    source = _source(args, AnalyzeConfig.load(None))
    time.sleep(0.05)
    assert source.now() == datetime(2026, 1, 7, 17, 38, tzinfo=UTC)


def test_a_stock_fleets_replay_is_read_through_the_adapters(tmp_path: Path) -> None:
    """A history of stock exporters (dcgm-exporter's Xid field, no Oximeter exporter) replayed with
    ``--inputs stock``: the analyzer reads what the adapter rules would record from it, as
    Prometheus holds it, and opens the same incident as on Oximeter's telemetry."""
    incident = _replayed_incident(tmp_path, SCENARIO + "telemetry: stock\n", "--inputs", "stock")
    assert (incident.layer, incident.rule, incident.root_cause.signal) == (
        "infrastructure", "xid_critical", "xid_paging")
    assert {k: v for k, v in incident.root_cause.labels if k in ("node", "gpu")} == {"node": "n1", "gpu": "1"}
