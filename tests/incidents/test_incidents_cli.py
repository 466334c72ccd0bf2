"""``oximeter incidents`` against a real store file, through the console entry point: once as the
installed command in a process of its own, the rest through the same ``main()`` in this process
(each process would pay a second and a half of imports)."""

from __future__ import annotations

import json
import subprocess
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from incident_cases import ev, gpu
from inprocess import run_main

from analyzer.diagnosis.topology import Topology, TopologySettings
from analyzer.incidents.lifecycle import IncidentSettings, IncidentTracker, findings
from analyzer.incidents.store import IncidentStore
from oximeter.store import connect
from stack.procs import oximeter_argv

TOPO = Topology.from_settings(TopologySettings(services={"chat": ["node-0"]}))


@pytest.fixture(scope="module")
def store_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two incidents an hour ago: a resolved scheduling bottleneck and an open paging Xid."""
    path = tmp_path_factory.mktemp("cli") / "oximeter.db"
    store = IncidentStore(connect(path))
    tracker = IncidentTracker(IncidentSettings(resolve_after_s=60))
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)
    q = replace(ev("queue_wait_p99", 4.8, 0.787, node="node-0", service="chat"), onset=start,
                detected_at=start + timedelta(minutes=1))
    xid = replace(ev("xid_paging", 1, 0, node="node-1", gpu="3", xid="79"), onset=start,
                  detected_at=start + timedelta(minutes=1))
    snap = {"gpu_utilization_p95": {gpu(): 0.32}}
    for minute, events in ((2, [q, xid]), (10, [replace(q, cleared_at=start + timedelta(minutes=3)), xid])):
        now = start + timedelta(minutes=minute)
        changes, touched = tracker.step(findings(events, TOPO, now=now, snapshot=snap), now)
        store.save(touched, changes)
    store.conn.close()
    return path


oxi = run_main


def test_list_json_and_filters(store_path: Path) -> None:
    out = subprocess.run(oximeter_argv("incidents", "--store", str(store_path), "list", "--json"),
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    assert [i["rule"] for i in json.loads(out.stdout)] == ["scheduling_bottleneck", "xid_critical"]
    out = oxi("incidents", "--store", str(store_path), "list", "--state", "open", "--node", "node-1",
              "--json")
    assert [i["rule"] for i in json.loads(out.stdout)] == ["xid_critical"]
    out = oxi("incidents", "--store", str(store_path), "list", "--since", "10m", "--json")
    assert [i["rule"] for i in json.loads(out.stdout)] == ["xid_critical"]


def test_list_table_show_and_stats(store_path: Path) -> None:
    table = oxi("incidents", "--store", str(store_path), "list").stdout.splitlines()
    assert table[0].split() == ["ID", "STATE", "SEVERITY", "LAYER", "RULE", "ROOT", "CAUSE", "ONSET"]
    assert len(table) == 3
    inc_id = table[1].split()[0]
    shown = oxi("incidents", "--store", str(store_path), "show", inc_id)
    assert shown.returncode == 0
    assert "diagnosis: queue_wait p99 4.8 s = 6.1 × baseline while GPU util 32 %" in shown.stdout
    as_json = json.loads(oxi("incidents", "--store", str(store_path), "show", inc_id, "--json").stdout)
    assert [n["kind"] for n in as_json["notifications"]] == ["opened", "resolved"]
    stats = json.loads(oxi("incidents", "--store", str(store_path), "stats", "--json").stdout)
    assert (stats["total"], stats["open"]) == (2, 1)
    assert stats["by_layer"] == {"infrastructure": 1, "scheduling": 1}
    assert stats["mttd_s"] == 120.0 and stats["mttr_s"] == 600.0


def test_errors_exit_2_with_a_reason(store_path: Path) -> None:
    bad = oxi("incidents", "--store", str(store_path), "list", "--since", "soon")
    assert bad.returncode == 2
    assert "since: expected a duration such as 90s, 15m, 24h or 7d, got 'soon'" in bad.stderr
    missing = oxi("incidents", "--store", str(store_path), "show", "inc-nope")
    assert (missing.returncode, missing.stderr.strip()) == (2, "oximeter incidents: no incident 'inc-nope'")
