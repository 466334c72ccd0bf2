"""``oximeter drill`` in replay: the whole library passes, a wrong truth fails, the JSON has its shape;
plus the scoring, the windows and the scenario lookup as tables.

Histories are cached in the per-user drill cache (keyed by the scenario, the window and the
generator's version), so only the first run after a generator change pays for generation, in any
checkout.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from drills.cli import DEFAULT_CACHE, LIBRARY, scenario_paths
from drills.history import DRILL_END_S, drill_windows, same_time_window
from drills.score import expected_truths, score
from oximeter.errors import ConfigError
from simulator.scenario import load_scenario
from stack.procs import oximeter_argv

ROOT = Path(__file__).resolve().parents[2]
CACHE = DEFAULT_CACHE
# Generating the library's histories on a cold cache takes minutes on 2 shared cores.
COLD_TIMEOUT_S = 1800


def drill(*args: str) -> subprocess.CompletedProcess[str]:
    """``oximeter drill ARGS --replay`` against the shared cache."""
    return subprocess.run(oximeter_argv("drill", *args, "--replay", "--cache", str(CACHE)), cwd=ROOT,
                          capture_output=True, text=True, timeout=COLD_TIMEOUT_S, check=False)


@pytest.fixture(scope="module")
def library() -> dict[str, Any]:
    """``oximeter drill --all --replay --json`` over the library: one run that the tests below read
    (each drill run on its own would replay its scenario again)."""
    result = drill("--all", "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    doc: dict[str, Any] = json.loads(result.stdout)
    return doc


def one_drill(library: dict[str, Any], name: str) -> dict[str, Any]:
    """The library run's drill of scenario ``name``."""
    [found] = [d for d in library["drills"] if d["scenario"] == name]
    return found


@pytest.mark.timeout(COLD_TIMEOUT_S)
def test_every_library_scenario_passes_in_replay(library: dict[str, Any]) -> None:
    count = len(list(LIBRARY.glob("*.yaml")))
    failed = [(d["scenario"], d["reason"]) for d in library["drills"] if not d["passed"]]
    assert (library["passed"], library["failed"], failed) == (count, 0, [])


@pytest.mark.timeout(COLD_TIMEOUT_S)
def test_every_library_scenario_passes_or_says_why_not_on_stock_telemetry() -> None:
    """The library on a stock fleet (no gateway, the stock exporters): every drill its telemetry can
    judge passes (the fault-free week opens nothing there either), and the rest say why not."""
    result = drill("--all", "--json", "--inputs", "stock")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    doc = json.loads(result.stdout)
    failed = [(d["scenario"], d["reason"]) for d in doc["drills"]
              if not d["passed"] and not d["cannot_judge"]]
    assert (doc["failed"], failed) == (0, [])
    assert doc["passed"] + doc["cannot_judge"] == len(list(LIBRARY.glob("*.yaml")))
    assert one_drill(doc, "fault_free_week")["passed"]


@pytest.mark.timeout(COLD_TIMEOUT_S)
def test_two_shards_over_one_fleet_score_every_scenario_as_one_analyzer(library: dict[str, Any]) -> None:
    """The fleet split by node over two analyzers on one store (``analyzer.ha`` shards): every
    library drill passes, with the scores, messages and times of one analyzer over the whole
    fleet, the stock fleets' too (engine_oom's OOM-killed container on n1: kube-state-metrics names
    its pod, and its node only through kube_pod_info)."""
    result = drill("--all", "--json", "--shard", 'node="n1"', "--shard", 'node!="n1"')
    sharded = json.loads(result.stdout)
    assert {d["mode"] for d in library["drills"]} == {"replay", "replay/stock"}
    assert sharded["drills"] == library["drills"]
    assert all(d["passed"] for d in sharded["drills"])
    # A shard sees only its part: alone, the shard without the faulty node finds nothing.
    alone = json.loads(drill("peer_outlier", "--json", "--shard", 'node="n1"').stdout)
    assert (alone["passed"], alone["drills"][0]["reason"]) == (0, "not detected: no incident")


@pytest.mark.timeout(COLD_TIMEOUT_S)
def test_a_wrong_truth_fails(tmp_path: Path) -> None:
    # Thermal throttling, but the file claims a leak: the drill must say it missed.
    data = yaml.safe_load((LIBRARY / "thermal_throttle.yaml").read_text())
    data["truth"] = {"layer": "engine", "entity": {"node": "n1", "process": "vllm"}, "rule": "engine_leak"}
    (tmp_path / "wrong.yaml").write_text(yaml.safe_dump(data))
    result = drill("--all", "--scenarios", str(tmp_path))
    assert (result.returncode, result.stdout.strip().splitlines()[-1]) == (1, "0 passed, 1 failed")
    assert "engine/engine_leak" in result.stdout and "infrastructure/thermal_throttle" in result.stdout


@pytest.mark.timeout(COLD_TIMEOUT_S)
def test_stock_telemetry_judges_what_it_can_and_says_why_it_cannot(tmp_path: Path) -> None:
    # Two of the library's drills on a stock fleet: the thermal throttle shows in dcgm-exporter's
    # default fields; the ECC storm does not (dcgm-exporter ships its ECC fields commented out).
    for name in ("thermal_throttle", "ecc_storm"):
        shutil.copy(LIBRARY / f"{name}.yaml", tmp_path)
    result = drill("--all", "--scenarios", str(tmp_path), "--inputs", "stock", "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert (report["passed"], report["failed"], report["cannot_judge"]) == (1, 0, 1)
    by_name = {d["scenario"]: d for d in report["drills"]}
    thermal, ecc = by_name["thermal_throttle"], by_name["ecc_storm"]
    assert (thermal["mode"], thermal["passed"], thermal["cannot_judge"]) == ("replay/stock", True, None)
    named = [(a["layer"], a["rule"], a["entity"]["node"], a["entity"]["gpu"]) for a in thermal["attributed"]]
    assert named == [("infrastructure", "thermal_throttle", "n1", "2")]
    assert not ecc["passed"] and "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL" in ecc["cannot_judge"]
    # Split by node, the shard of n1 finds the throttle in dcgm-exporter's series, which name their
    # node by Hostname alone: the same drills, the same scores.
    sharded = drill("--all", "--scenarios", str(tmp_path), "--inputs", "stock", "--json",
                    "--shard", 'node="n1"', "--shard", 'node!="n1"')
    assert json.loads(sharded.stdout)["drills"] == report["drills"]


@pytest.mark.timeout(COLD_TIMEOUT_S)
def test_a_scenario_on_stock_telemetry_says_what_it_cannot_judge(tmp_path: Path) -> None:
    # The ECC storm again, its file saying the fleet runs stock telemetry (no --inputs): the same
    # verdict, in words, with the counters line it lacks.
    data = yaml.safe_load((LIBRARY / "ecc_storm.yaml").read_text())
    (tmp_path / "ecc_storm.yaml").write_text(yaml.safe_dump({**data, "telemetry": "stock"}))
    result = drill("--all", "--scenarios", str(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "replay/stock" in result.stdout and "cannot be judged: " in result.stdout
    assert "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL" in result.stdout
    last = result.stdout.strip().splitlines()[-1]
    assert last == "0 passed, 0 failed, 1 cannot be judged on stock telemetry"


@pytest.mark.timeout(COLD_TIMEOUT_S)
def test_json_output(library: dict[str, Any]) -> None:
    assert (library["skipped"], len(library["drills"])) == ([], len(list(LIBRARY.glob("*.yaml"))))
    one = one_drill(library, "xid_critical")
    assert sorted(one) == ["attributed", "budget", "cannot_judge", "detected", "expected", "harm", "messages",
                           "mode", "passed", "reason", "scenario", "time_to_detect_s"]
    assert one["cannot_judge"] is None  # Oximeter's own telemetry feeds every signal
    assert (one["scenario"], one["mode"], one["passed"], one["detected"], one["reason"]) == \
        ("xid_critical", "replay", True, True, "right")
    assert one["expected"] == [{"layer": "infrastructure", "entity": {"node": "n1", "gpu": "3"},
                                "rule": "xid_critical"}]
    [got] = one["attributed"]
    assert (got["layer"], got["rule"], got["signal"], got["entity"]["node"], got["entity"]["gpu"]) == \
        ("infrastructure", "xid_critical", "xid_paging", "n1", "3")
    # A paging Xid needs no persistence: opened in the cycle of the fault; then opened + resolved.
    assert (one["time_to_detect_s"], one["messages"], one["budget"]) == (0.0, 2, 4)
    # The card fell off the bus with no request harmed: a ticket's worth of evidence, not a page.
    [harm] = one["harm"]
    assert (harm["rule"], harm["severity"], harm["burn"]["grade"], harm["follows"]) == \
        ("xid_critical", "warning", "none", True)


@pytest.mark.timeout(COLD_TIMEOUT_S)
def test_every_drill_states_a_severity_that_follows_its_burn(library: dict[str, Any]) -> None:
    for one in library["drills"]:
        assert one["harm"] and all(line["follows"] for line in one["harm"]), (one["scenario"], one["harm"])
    # A fault burning a budget fast enough to page is open within 2 minutes of its onset.
    paging = {one["scenario"]: one["time_to_detect_s"] for one in library["drills"]
              if any(line["burn"]["grade"] == "page" for line in one["harm"])}
    assert len(paging) >= 3 and all(ttd is not None and ttd <= 120 for ttd in paging.values()), paging
    # Errors on every answer burn the availability budget far past a page's rate: the incident pages.
    [errors] = one_drill(library, "ingress_errors")["harm"]
    assert (errors["severity"], errors["burn"]["grade"], errors["burn"]["sli"]) == \
        ("critical", "page", "availability")
    assert errors["burn"]["rate"] >= 14.4
    # A dependency slowing one node's answers spends its queue-wait budget slowly: a ticket, no page.
    [slow] = one_drill(library, "dependency_degraded")["harm"]
    assert (slow["severity"], slow["burn"]["grade"]) == ("warning", "ticket")
    assert 1 <= slow["burn"]["rate"] < 6


@pytest.mark.timeout(COLD_TIMEOUT_S)
@pytest.mark.parametrize("name", ["gpu_memory_leak", "engine_leak"])
def test_a_leak_incident_says_when_it_will_be_full(library: dict[str, Any], name: str) -> None:
    [got] = one_drill(library, name)["attributed"]
    assert re.search(r"full in \d+(\.\d)? (min|h|d)\b", got["sentence"]), got["sentence"]


@pytest.mark.timeout(COLD_TIMEOUT_S)
def test_a_degraded_nvlink_is_named_by_its_link(library: dict[str, Any]) -> None:
    # The engine on that node slows too; the incident still names the link, with the slowdown as impact.
    [got] = one_drill(library, "nvlink_degraded")["attributed"]
    assert (got["layer"], got["rule"], got["signal"]) == ("infrastructure", "nvlink_degraded",
                                                          "nvlink_errors_increase")
    assert {k: got["entity"][k] for k in ("node", "gpu", "link")} == {"node": "n1", "gpu": "1", "link": "2"}
    assert got["sentence"].startswith("NVLink 2 of GPU 1 on n1: +"), got["sentence"]


def test_unknown_scenario_is_a_usage_error() -> None:
    result = drill("no_such_scenario")
    assert result.returncode == 2
    assert "no scenario 'no_such_scenario'" in result.stderr and "thermal_throttle" in result.stderr


# -- scoring -------------------------------------------------------------------------------------------
THERMAL = {"layer": "infrastructure", "entity": {"node": "n1", "gpu": "2"}, "rule": "thermal_throttle"}
DEPENDENCY = {"layer": "dependency", "entity": {"node": "n2", "dependency": "vectordb"},
              "rule": "dependency_degraded"}
START = datetime(2026, 1, 7, 15, 0, tzinfo=UTC)


def incident(layer: str, rule: str, opened: str = "2026-01-07T15:03:00Z", **labels: str) -> dict[str, Any]:
    """An incident as the API and ``Incident.to_dict()`` shape it (only what scoring reads)."""
    return {"id": f"inc-{rule}-{len(labels)}", "layer": layer, "rule": rule, "opened_at": opened,
            "root_cause": {"signal": "gpu_temperature", "labels": labels}}


HOT = incident("infrastructure", "thermal_throttle", node="n1", gpu="2", uuid="GPU-x")
VECTOR = incident("dependency", "dependency_degraded", node="n2", dependency="vectordb")


@pytest.mark.parametrize(("expected", "incidents", "verdict"), [
    ([THERMAL], [HOT], (True, True, 180.0, "right")),
    ([THERMAL], [], (False, False, None, "not detected: no incident")),
    ([THERMAL], [incident("scheduling", "capacity_exhausted", node="n1")],
     (False, True, 180.0, "attributed 0 of 1 root cause(s) right")),
    ([THERMAL], [incident("infrastructure", "thermal_throttle", node="n1", gpu="3")],
     (False, True, 180.0, "attributed 0 of 1 root cause(s) right")),
    ([THERMAL], [HOT, incident("ingress", "unclassified", node="n2")],
     (False, True, 180.0, "2 incidents, expected 1")),
    ([], [], (True, False, None, "quiet, as expected")),
    ([], [HOT], (False, False, 180.0, "1 incident(s) on a fault-free run")),
    ([THERMAL, DEPENDENCY], [VECTOR, HOT], (True, True, 180.0, "right")),
    ([THERMAL, DEPENDENCY], [HOT, HOT], (False, True, 180.0, "attributed 1 of 2 root cause(s) right")),
])
def test_score(expected: list[dict[str, Any]], incidents: list[dict[str, Any]],
               verdict: tuple[bool, bool, float | None, str]) -> None:
    s = score("s", "replay", expected, incidents, START, messages=2)
    assert (s.passed, s.detected, s.time_to_detect_s, s.reason) == verdict


@pytest.mark.parametrize(("messages", "budget", "verdict"), [
    (4, 4, (True, "right")),
    (5, 4, (False, "5 messages, over the budget of 4")),
    (35, None, (True, "right")),
])
def test_a_drill_over_its_message_budget_fails(messages: int, budget: int | None,
                                               verdict: tuple[bool, str]) -> None:
    s = score("s", "replay", [THERMAL], [HOT], START, messages, budget)
    assert (s.passed, s.reason) == verdict


def test_message_budget_grows_only_with_reopens() -> None:
    from analyzer.incidents.stability import message_budget

    assert message_budget(["opened", "severity_up", "resolved"]) == 4
    assert message_budget(["opened", "resolved", "opened", "resolved"]) == 6


def test_time_to_detect_of_an_incident_open_before_the_fault_is_its_first_later_evidence() -> None:
    # Live: an incident already open on the node absorbs the drill's anomalies.
    older = {**HOT, "opened_at": "2026-01-07T14:00:00Z",
             "evidence": [{"detected_at": "2026-01-07T14:00:00Z"}, {"detected_at": "2026-01-07T15:02:00Z"}]}
    assert score("s", "live", [THERMAL], [older], START, messages=1).time_to_detect_s == 120.0


@pytest.mark.parametrize(("truth", "also", "count"), [
    ({"layer": "none", "entity": {}, "rule": "none"}, [], 0),
    (THERMAL, [], 1),
    (THERMAL, [DEPENDENCY], 2),
])
def test_expected_truths(truth: dict[str, Any], also: list[dict[str, Any]], count: int) -> None:
    assert len(expected_truths(truth, also)) == count


# -- windows and lookup --------------------------------------------------------------------------------
@pytest.mark.parametrize(("name", "windows"), [
    # (hours of history, hours before the anchor it ends, [(kind, start h before its end, duration s)])
    ("thermal_throttle", [(3.5, 0.5, [("thermal_throttle", 2.5, 7200.0)])]),
    ("engine_leak", [(3.0, 4.0, [("rss_leak", 2.0, None)])]),
    ("xid_critical", [(1.52, 1.48, [("xid", 0.52, 60.0)])]),
    # A week's nuisance on its own day and hour, each with its own window.
    ("fault_free_week", [(1.58, 116.42, [("traffic_spike", 0.58, 300.0)]),
                         (1.52, 61.48, [("engine_restart", 0.52, 60.0)]),
                         (1.53, 33.47, [("scrape_gap", 0.53, 120.0)])]),
])
def test_drill_windows(name: str, windows: list[tuple[float, float, list[tuple[str, float, float | None]]]],
                       ) -> None:
    got = [(round(w.days * 24, 2), round((DRILL_END_S - w.end_s) / 3600, 2),
            [(f.kind, round(-f.start / 3600, 2), f.duration) for f in w.scenario.faults])
           for w in drill_windows(load_scenario(LIBRARY / f"{name}.yaml"))]
    assert got == windows


def test_same_time_window_is_a_day_earlier_fault_free_and_wider() -> None:
    [window] = drill_windows(load_scenario(LIBRARY / "thermal_throttle.yaml"))
    before = same_time_window(window)
    assert (before.scenario.faults, round(before.days * 24, 2), window.end_s - before.end_s) == \
        ([], 4.5, 86400.0 - 1800.0)


def test_scenario_paths(tmp_path: Path) -> None:
    (tmp_path / "mine.yaml").write_text("name: mine\n")
    assert scenario_paths("thermal_throttle", False, None) == [LIBRARY / "thermal_throttle.yaml"]
    assert scenario_paths(str(tmp_path / "mine.yaml"), False, None) == [tmp_path / "mine.yaml"]
    assert scenario_paths("mine", False, tmp_path) == [tmp_path / "mine.yaml"]
    assert scenario_paths(None, True, tmp_path) == [tmp_path / "mine.yaml"]
    with pytest.raises(ConfigError, match="no scenario files"):
        scenario_paths(None, True, tmp_path / "empty")
    with pytest.raises(ConfigError, match="give a SCENARIO"):
        scenario_paths(None, False, None)
