"""``oximeter drill``: rehearse a fault scenario and score the analyzer's diagnosis against its truth.

Drills trade accidents for exercises. A drill runs a scenario file (the built-in
library in ``simulator/scenarios/``, or any folder) either in **replay** (the scenario's history,
cached, through detection, correlation and the incident lifecycle in accelerated time; see
``analyzer/replay.py``) or **live** (the faults injected into a running simulator through
``POST /admin/faults``, the analyzer's ``GET /api/incidents`` polled until a deadline). Both are
scored the same way: detected or not, time to detect (opened − fault start), the attributed
layer, entity and rule against the truth, and the chat messages against the message budget (per
incident: opened, one root-cause change, one severity change, resolved). A drill passes when it
names its truth within the budget. The exit code is 1 when any drill fails, 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from oximeter.cache import cache_dir
from oximeter.errors import ConfigError, OximeterError

LIBRARY = Path(__file__).resolve().parent.parent / "simulator" / "scenarios"
DEFAULT_CACHE = cache_dir("drill")  # per user, shared by every checkout (keys cover the code)


@dataclass(frozen=True)
class Attribution:
    """What the analyzer said about one incident."""

    incident_id: str
    layer: str
    rule: str
    signal: str
    entity: dict[str, str]
    opened_at: str | None
    sentence: str = ""  # the diagnosis as the incident states it


@dataclass(frozen=True)
class DrillScore:
    """One drill's verdict (``--json`` prints these)."""

    scenario: str
    mode: str
    passed: bool
    detected: bool
    time_to_detect_s: float | None
    expected: list[dict[str, Any]]
    attributed: list[Attribution]
    messages: int
    reason: str
    budget: int | None = None  # the most messages its incidents may cause; None: not checked
    # Why the inputs replayed cannot show this fault (stock telemetry lacks what names it); such a
    # drill is listed, not counted as passed or failed.
    cannot_judge: str | None = None

    @property
    def truth_text(self) -> str:
        """``layer/rule entity`` of every expected root cause, or ``none``."""
        return "; ".join(f"{t['layer']}/{t['rule']} {_entity(t.get('entity') or {})}".strip()
                         for t in self.expected) or "none"

    @property
    def got_text(self) -> str:
        """``layer/rule signal@entity`` of every incident, or ``none``."""
        return "; ".join(f"{a.layer}/{a.rule} {a.signal}@{_entity(a.entity)}"
                         for a in self.attributed) or "none"


def _entity(labels: Mapping[str, Any]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()) if k in ("node", "gpu", "link", "service",
                                                                           "dependency", "process", "job"))


def parse_when(text: str | None) -> datetime | None:
    """An ISO timestamp from the API's JSON (``Z`` or an offset), or None."""
    return None if not text else datetime.fromisoformat(text.replace("Z", "+00:00"))


def _detected(incident: Mapping[str, Any], fault_start: datetime | None) -> datetime | None:
    """When the analyzer showed it: the opening, or for an incident open before the fault, its
    first evidence detected after the fault started."""
    opened = parse_when(incident.get("opened_at"))
    if fault_start is None or opened is None or opened >= fault_start:
        return opened
    later = [w for e in incident.get("evidence", [])
             if (w := parse_when(e.get("detected_at"))) is not None and w >= fault_start]
    return min(later) if later else opened


def expected_truths(truth: Mapping[str, Any], also: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The root causes a scenario should yield: none for a fault-free one, else the truth and its ``also``."""
    if truth["rule"] == "none":
        return []
    return [dict(truth), *(dict(a) for a in also)]


def score(scenario: str, mode: str, expected: list[dict[str, Any]], incidents: Sequence[Mapping[str, Any]],
          fault_start: datetime | None, messages: int, budget: int | None = None) -> DrillScore:
    """Score incidents (the API's JSON shape) against the expected root causes.

    A drill passes when there is exactly one incident per expected root cause, each root cause
    is named (layer, rule and every truth entity label) by a distinct incident, and chat got no
    more than ``budget`` messages (when given).
    """
    from analyzer.replay import truth_matches

    attributed = [Attribution(str(i["id"]), str(i["layer"]), str(i["rule"]), str(i["root_cause"]["signal"]),
                              {k: str(v) for k, v in (i["root_cause"].get("labels") or {}).items()},
                              i.get("opened_at"), str((i.get("diagnosis") or {}).get("sentence", "")))
                  for i in incidents]
    unused = list(incidents)
    matched: list[Mapping[str, Any]] = []
    for truth in expected:
        hit = next((i for i in unused if truth_matches(i, truth)), None)
        if hit is not None:
            unused.remove(hit)
            matched.append(hit)
    first = matched[0] if matched else (incidents[0] if incidents else None)
    seen = _detected(first, fault_start) if first is not None else None
    ttd = (seen - fault_start).total_seconds() if seen and fault_start else None
    if not expected:
        reason = f"{len(incidents)} incident(s) on a fault-free run" if incidents else "quiet, as expected"
    elif not incidents:
        reason = "not detected: no incident"
    elif len(matched) < len(expected):
        reason = f"attributed {len(matched)} of {len(expected)} root cause(s) right"
    elif len(incidents) != len(expected):
        reason = f"{len(incidents)} incidents, expected {len(expected)}"
    else:
        reason = "right"
    passed = len(matched) == len(expected) and len(incidents) == len(expected)
    if budget is not None and messages > budget:
        passed, reason = False, f"{messages} messages, over the budget of {budget}" + (
            "" if reason in ("right", "quiet, as expected") else f"; {reason}")
    return DrillScore(scenario, mode, passed, bool(incidents) and bool(expected), ttd, expected, attributed,
                      messages, reason, budget)


# -- replay -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Replayed:
    """A scenario's drill windows replayed: what the analyzer opened and told, and the truth."""

    incidents: list[dict[str, Any]]  # the API's JSON shape
    told: list[Any]  # the notify-worthy changes (analyzer.incidents.Change), in order
    faults: list[dict[str, Any]]  # truth.json's faults, with absolute start/end epochs
    days: float  # simulated time replayed, all windows together


def replay_windows(sc: Any, cache_dir: Path, step_s: float, interval_s: float) -> Replayed:
    """Every drill window of scenario ``sc`` (generated or cached) through the daemon's cycles."""
    from analyzer.incidents import NOTIFY_KINDS
    from analyzer.replay import DAY_S, drill_windows, history_dir, replay_history, same_time_window
    from analyzer.settings import AnalyzerSettings

    stock = sc.telemetry == "stock"
    # Stock inputs leave out the signals nothing feeds, as the analyzer does on them.
    catalogue = AnalyzerSettings(inputs="stock" if stock else "oximeter").catalogue()
    incidents: list[dict[str, Any]] = []
    told: list[Any] = []
    faults: list[dict[str, Any]] = []
    days = 0.0
    for window in drill_windows(sc, step_s=step_s):
        directory = history_dir(window, cache_dir, step_s)
        yesterday = history_dir(same_time_window(window), cache_dir, step_s)
        faults += json.loads((directory / "truth.json").read_text(encoding="utf-8"))["faults"]
        outcome = replay_history(directory, interval_s, catalogue=catalogue, same_time={DAY_S: yesterday},
                                 stock=stock)
        incidents += [i.to_dict() for i in outcome.incidents]
        # Replay has no Alertmanager: chat's messages are the incidents' told changes.
        told += [c for c in outcome.changes if c.kind in NOTIFY_KINDS]
        days += window.days
    return Replayed(incidents, told, faults, days)


def load_drill_scenario(path: Path, trace: tuple[str, float] | None = None, inputs: str = "oximeter") -> Any:
    """The scenario at ``path``; with ``trace`` (file, peak utilisation), its traffic replayed from it;
    ``inputs``: the telemetry the fleet presents (``stock``: no gateway, stock exporters)."""
    from simulator.scenario import load_scenario, with_trace

    sc = load_scenario(path)
    sc = sc if trace is None else with_trace(sc, *trace)
    return sc if inputs == "oximeter" else sc.model_copy(update={"telemetry": inputs})


def replay_drill(path: Path, cache_dir: Path, step_s: float, interval_s: float,
                 trace: tuple[str, float] | None = None, inputs: str = "oximeter") -> DrillScore:
    """The scenario's windows replayed through the analyzer, scored; a stock drill that fails says
    whether stock telemetry could have judged it (:mod:`analyzer.drill_stock`)."""
    from analyzer.stability import message_budget

    sc = load_drill_scenario(path, trace, inputs)
    run = replay_windows(sc, cache_dir, step_s, interval_s)
    budget = sum(message_budget(c.kind for c in run.told if c.incident_id == i["id"]) for i in run.incidents)
    starts = [f["start_epoch_s"] for f in run.faults]
    start = datetime.fromtimestamp(min(starts), tz=UTC) if starts else None
    expected = expected_truths(sc.truth.model_dump(), [a.model_dump() for a in sc.also])
    mode = "replay" if inputs == "oximeter" else f"replay/{inputs}"
    verdict = score(sc.name, mode, expected, run.incidents, start, len(run.told), budget)
    if verdict.passed or inputs == "oximeter":
        return verdict
    from analyzer.drill_stock import why_stock_cannot_judge

    return replace(verdict, cannot_judge=why_stock_cannot_judge(path, cache_dir, step_s, interval_s, trace))


def prepare_drill_windows(paths: Sequence[Path], cache_dir: Path, step_s: float, jobs: int,
                          trace: tuple[str, float] | None = None, inputs: str = "oximeter") -> None:
    """Every drill window of the scenarios and the fault-free day before each, generated `jobs` at a time."""
    from analyzer.replay import drill_windows, prepare, same_time_window

    windows = [w for p in paths for w in drill_windows(load_drill_scenario(p, trace, inputs), step_s=step_s)]
    windows += [same_time_window(w) for w in windows]
    prepare(windows, cache_dir, step_s, jobs)


# -- live -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LiveTarget:
    """A running stack: the simulator's admin API and the analyzer's API."""

    sim_url: str
    analyzer_url: str
    admin_token: str
    time_scale: float = 1.0
    timeout_s: float = 600.0
    quiet_s: float = 120.0
    poll_s: float = 2.0


def history_only_kinds(path: Path) -> list[str]:
    """The scenario's fault kinds that only ``oximeter sim history`` simulates."""
    from simulator.faults import FAULT_KINDS
    from simulator.scenario import load_scenario

    kinds = {f.kind for f in load_scenario(path).faults}
    return sorted(k for k in kinds if k in FAULT_KINDS and FAULT_KINDS[k].history_only)


def live_drill(path: Path, target: LiveTarget) -> DrillScore:
    """Inject the scenario's faults now (durations × time scale), watch the analyzer, score, clean up."""
    import requests

    from analyzer.incidents import NOTIFY_KINDS
    from analyzer.stability import message_budget
    from simulator.scenario import load_scenario

    sc = load_scenario(path)
    headers = {"Authorization": f"Bearer {target.admin_token}"}
    sim, api = target.sim_url.rstrip("/"), target.analyzer_url.rstrip("/")
    before = {i["id"]: i for i in _incidents(api)}
    sent_before = _chat_sent(api)
    sim_now = float(requests.get(f"{sim}/fleet", timeout=10).json()["now"])
    first = min((f.start for f in sc.faults), default=0.0)
    injected: list[str] = []
    started = datetime.now(UTC)
    expected = expected_truths(sc.truth.model_dump(), [a.model_dump() for a in sc.also])
    try:
        for n, fault in enumerate(sc.faults):
            body: dict[str, Any] = {"kind": fault.kind, "node": fault.node, "id": f"drill-{sc.name}-{n}",
                                    "start": sim_now + (fault.start - first) * target.time_scale}
            if fault.gpu is not None:
                body["gpu"] = fault.gpu
            if fault.link is not None:
                body["link"] = fault.link
            if fault.strength is not None:
                body["strength"] = fault.strength
            if fault.duration is not None:
                body["duration_s"] = fault.duration * target.time_scale
            resp = requests.post(f"{sim}/admin/faults", json=body, headers=headers, timeout=10)
            if resp.status_code != 201:
                raise OximeterError(f"simulator refused fault {n} ({fault.kind}): "
                                    f"{resp.status_code} {resp.text[:200]}")
            injected.append(body["id"])
        new = _watch(api, before, started, expected, target)
    finally:
        for fault_id in injected:
            requests.delete(f"{sim}/admin/faults/{fault_id}", headers=headers, timeout=10)
    told = {i["id"]: [c["kind"] for c in _notifications(api, i["id"])
                      if c["kind"] in NOTIFY_KINDS and (parse_when(c.get("at")) or started) >= started]
            for i in new}
    # Everything chat got meanwhile (forwarded Alertmanager alerts too), once the outbox drained.
    sent = _chat_sent(api, settle_s=target.quiet_s)
    chat = max((n - sent_before.get(ch, 0.0) for ch, n in sent.items()), default=0.0)
    messages = max(sum(len(k) for k in told.values()), int(chat))
    return score(sc.name, "live", expected, new, started, messages,
                 sum(message_budget(kinds) for kinds in told.values()))


def _incidents(api: str) -> list[dict[str, Any]]:
    import requests

    resp = requests.get(f"{api}/api/incidents", timeout=10)
    resp.raise_for_status()
    return list(resp.json()["incidents"])


def _chat_sent(api: str, settle_s: float = 0.0) -> dict[str, float]:
    """Messages sent per chat channel so far (the analyzer's ``oximeter_notifications_total``),
    after waiting up to ``settle_s`` for its outbox to drain; empty when it does not say."""
    import requests
    from prometheus_client.parser import text_string_to_metric_families

    deadline = time.monotonic() + settle_s
    while True:
        resp = requests.get(f"{api}/metrics", timeout=10)
        if not resp.ok:
            return {}
        families = {f.name: f for f in text_string_to_metric_families(resp.text)}
        pending = families.get("oximeter_outbox_pending")
        if pending is None or not any(s.value for s in pending.samples) or time.monotonic() >= deadline:
            break
        time.sleep(1.0)
    family = families.get("oximeter_notifications")
    return {} if family is None else {
        s.labels["channel"]: s.value for s in family.samples
        if s.name.endswith("_total") and s.labels.get("result") == "sent"}


def _notifications(api: str, incident_id: str) -> list[dict[str, Any]]:
    import requests

    resp = requests.get(f"{api}/api/incidents/{incident_id}", timeout=10)
    return list(resp.json().get("notifications", [])) if resp.ok else []


def _touched(incidents: list[dict[str, Any]], before: Mapping[str, Mapping[str, Any]],
             since: datetime) -> list[dict[str, Any]]:
    """Incidents opened since the injection, or older ones that took evidence detected since then
    (an open incident on the same node absorbs the drill's anomalies and changes its root cause)."""
    def fresh(inc: Mapping[str, Any]) -> bool:
        return any((when := parse_when(e.get("detected_at"))) is not None and when >= since
                   for e in inc.get("evidence", []))

    return [i for i in incidents if i["id"] not in before or fresh(i)]


def _watch(api: str, before: Mapping[str, Mapping[str, Any]], since: datetime, expected: list[dict[str, Any]],
           target: LiveTarget) -> list[dict[str, Any]]:
    """Incidents the drill touched, polled until every expected root cause is named (or quiet_s
    for a fault-free scenario)."""
    from analyzer.replay import truth_matches

    limit = target.quiet_s if not expected else target.timeout_s
    deadline = time.monotonic() + limit
    new: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        new = _touched(_incidents(api), before, since)
        if expected and all(any(truth_matches(i, t) for i in new) for t in expected):
            break
        time.sleep(target.poll_s)
    return new


# -- command ----------------------------------------------------------------------------------------
def scenario_paths(name: str | None, run_all: bool, directory: Path | None) -> list[Path]:
    """The scenario files chosen: every ``*.yaml`` of the folder, or one name or path."""
    folder = directory or LIBRARY
    if run_all:
        found = sorted(folder.glob("*.yaml"))
        if not found:
            raise ConfigError([f"no scenario files (*.yaml) in {folder}"], None)
        return found
    if not name:
        raise ConfigError(["give a SCENARIO (name or file) or --all"], None)
    for candidate in (Path(name), folder / f"{name}.yaml", folder / name):
        if candidate.is_file():
            return [candidate]
    known = ", ".join(p.stem for p in sorted(folder.glob("*.yaml")))
    raise ConfigError([f"no scenario {name!r} (a file, or one of: {known})"], None)


def print_table(scores: Sequence[DrillScore]) -> None:
    """A rich table of the drills, then the closing line ``N passed, M failed``."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title="Oximeter drills (SIMULATION)")
    for column in ("scenario", "mode", "truth", "attributed", "detect", "msgs/budget", "result"):
        table.add_column(column)
    for s in scores:
        ttd = "-" if s.time_to_detect_s is None else f"{s.time_to_detect_s / 60:.1f} min"
        msgs = str(s.messages) if s.budget is None else f"{s.messages}/{s.budget}"
        result = ("pass" if s.passed else f"cannot judge: {s.cannot_judge}" if s.cannot_judge
                  else f"FAIL: {s.reason}")
        table.add_row(s.scenario, s.mode, s.truth_text, s.got_text, ttd, msgs, result)
    Console(width=200).print(table)


def run(args: argparse.Namespace) -> int:
    """Entry point of ``oximeter drill``."""
    from analyzer.incident_store import parse_duration
    from oximeter.secrets import read_secret

    live = args.live or (not args.replay and bool(args.sim_url and args.analyzer_url))
    try:
        paths = scenario_paths(args.scenario, args.all, Path(args.scenarios) if args.scenarios else None)
        step_s = parse_duration(args.step, "--step").total_seconds()
        interval_s = parse_duration(args.interval, "--interval").total_seconds()
        target = None
        trace = None if args.trace is None else (args.trace, args.trace_peak_utilisation)
        if trace is not None:
            if live:
                raise ConfigError(["--trace replays histories: use it with --replay (live traffic comes "
                                   "from `oximeter traffic --trace`)"], None)
            from simulator.trace import load_trace

            load_trace(args.trace)
        if live and args.inputs != "oximeter":
            raise ConfigError(["--inputs picks what a replayed history presents; a live drill reads whatever "
                               "the running stack exports"], None)
        if live:
            if not (args.sim_url and args.analyzer_url):
                raise ConfigError(["--live needs --sim-url and --analyzer-url"], None)
            token = read_secret(args.admin_token_env)
            if token is None:
                raise ConfigError([f"--live needs the simulator's admin token in {args.admin_token_env} "
                                   f"(or {args.admin_token_env}_FILE)"], None)
            target = LiveTarget(args.sim_url, args.analyzer_url, token.get_secret_value(), args.time_scale,
                                args.timeout_s, args.quiet_s)
    except (OximeterError, ValueError) as exc:
        print(f"oximeter drill: {exc}", file=sys.stderr)
        return 2
    import requests

    scores: list[DrillScore] = []
    skipped: list[str] = []
    try:
        if target is None:
            prepare_drill_windows(paths, Path(args.cache), step_s, args.jobs, trace, args.inputs)
        for path in paths:
            if target is not None and (kinds := history_only_kinds(path)):
                # The live simulator refuses these kinds: say so rather than count a miss or a pass.
                skipped.append(f"{path.stem} ({', '.join(kinds)})")
                continue
            scores.append(live_drill(path, target) if target is not None
                          else replay_drill(path, Path(args.cache), step_s, interval_s, trace, args.inputs))
    except (OximeterError, requests.RequestException) as exc:
        print(f"oximeter drill: {exc}", file=sys.stderr)
        return 2
    passed = sum(s.passed for s in scores)
    unjudged = [s for s in scores if s.cannot_judge]
    failed = len(scores) - passed - len(unjudged)
    if args.json:
        print(json.dumps({"drills": [asdict(s) for s in scores], "passed": passed, "failed": failed,
                          "cannot_judge": len(unjudged), "skipped": skipped}, indent=2))
    else:
        print_table(scores)
        print("chat messages per drill: " + ", ".join(f"{s.scenario} {s.messages}" for s in scores))
        if skipped:
            print(f"skipped, history-only faults cannot be injected live: {'; '.join(skipped)}")
        print(f"{passed} passed, {failed} failed" + (f", {len(unjudged)} cannot be judged on {args.inputs} "
                                                      "telemetry" if unjudged else ""))
    return 0 if failed == 0 else 1


def configure(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``oximeter drill``."""
    parser.add_argument("scenario", nargs="?", metavar="SCENARIO",
                        help="a scenario name from the library (or --scenarios DIR), or a file")
    parser.add_argument("--all", action="store_true", help="every scenario of the library (or DIR)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--replay", action="store_true",
                      help="replay the scenario's history through the analyzer (default without URLs)")
    mode.add_argument("--live", action="store_true",
                      help="inject into a running simulator, watch the analyzer")
    parser.add_argument("--scenarios", metavar="DIR", help="folder of scenario files (default: the library)")
    parser.add_argument("--json", action="store_true", help="print the scores as JSON")
    replay = parser.add_argument_group("replay")
    replay.add_argument("--step", default="60s", help="history sample step (default 60s)")
    replay.add_argument("--interval", default="60s", help="analyzer cycle interval replayed (default 60s)")
    replay.add_argument("--inputs", choices=("oximeter", "stock"), default="oximeter",
                        help="what the replayed fleet presents: Oximeter's gateway and exporter "
                        "(default), or stock telemetry (no gateway, dcgm-exporter's default fields, vLLM's "
                        "own series), read through the adapter rules; a drill stock telemetry cannot show "
                        "is listed, with why")
    replay.add_argument("--jobs", type=int, default=2, help="histories generated in parallel (default 2)")
    replay.add_argument("--cache", default=str(DEFAULT_CACHE),
                        help=f"history cache folder (default {DEFAULT_CACHE})")
    from simulator.cli import add_trace_flags

    add_trace_flags(replay, "replay every scenario over this arrival trace's traffic instead of its own")
    live = parser.add_argument_group("live")
    live.add_argument("--sim-url", metavar="URL", help="the simulator (any engine port), e.g. http://127.0.0.1:8000")
    live.add_argument("--analyzer-url", metavar="URL", help="the analyzer API, e.g. http://127.0.0.1:9471")
    live.add_argument("--admin-token-env", default="OXIMETER_ADMIN_TOKEN", metavar="NAME",
                      help="env var (or NAME_FILE) holding the simulator's admin token")
    live.add_argument("--time-scale", type=float, default=1.0,
                      help="multiply fault durations and offsets (0.05: a 2 h fault lasts 6 min)")
    live.add_argument("--timeout-s", type=float, default=600.0, help="deadline for the incident to appear")
    live.add_argument("--quiet-s", type=float, default=120.0,
                      help="how long a fault-free scenario must stay quiet")
    parser.set_defaults(func=run)
