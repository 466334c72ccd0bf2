"""``oximeter drill``: rehearse a fault scenario and score the analyzer's diagnosis against its truth.

Drills trade accidents for exercises. A drill runs a scenario file (the built-in
library in ``simulator/scenarios/``, or any folder) either in **replay** (the scenario's history,
cached, through detection, correlation and the incident lifecycle in accelerated time; see
``drills/replay.py``) or **live** (the faults injected into a running simulator through
``POST /admin/faults``, the analyzer's ``GET /api/incidents`` polled until a deadline). Both are
scored the same way: detected or not, time to detect (opened − fault start), the attributed
layer, entity and rule against the truth, and the chat messages against the message budget (per
incident: opened, one root-cause change, one severity change, resolved). A drill passes when it
names its truth within the budget (``drills/score.py``). The exit code is 1 when any drill fails,
2 on bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from drills.live import LiveTarget, history_only_kinds, live_drill
from drills.replay import prepare_drill_windows, replay_drill
from drills.score import DrillScore
from oximeter.cache import cache_dir
from oximeter.errors import ConfigError, OximeterError

LIBRARY = Path(__file__).resolve().parent.parent / "simulator" / "scenarios"
# Per user, shared by every checkout: the keys cover the scenario and the generator's version.
DEFAULT_CACHE = cache_dir("drill")


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
        result = ("pass" if s.passed else f"cannot be judged: {s.cannot_judge}" if s.cannot_judge
                  else f"FAIL: {s.reason}")
        table.add_row(s.scenario, s.mode, s.truth_text, s.got_text, ttd, msgs, result)
    Console(width=200).print(table)


def run(args: argparse.Namespace) -> int:
    """Entry point of ``oximeter drill``."""
    from analyzer.incidents.store import parse_duration
    from oximeter.promql import parse_matchers
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
        if live and args.shard:
            raise ConfigError(["--shard splits a replayed history; a live drill watches the analyzers "
                               "that run"], None)
        for selector in args.shard:
            parse_matchers(selector)
        if args.incremental and (live or args.shard):
            raise ConfigError(["--incremental replays one analyzer over a history: not with --live or "
                               "--shard"], None)
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
                          else replay_drill(path, Path(args.cache), step_s, interval_s, trace, args.inputs,
                                            args.shard, incremental=args.incremental))
    except (OximeterError, requests.RequestException) as exc:
        print(f"oximeter drill: {exc}", file=sys.stderr)
        return 2
    passed = sum(s.passed for s in scores)
    unjudged = [s for s in scores if s.cannot_judge]
    failed = len(scores) - passed - len(unjudged)
    if args.json:
        print(json.dumps({"drills": [s.to_dict() for s in scores], "passed": passed, "failed": failed,
                          "cannot_judge": len(unjudged), "skipped": skipped}, indent=2))
    else:
        print_table(scores)
        print("chat messages per drill: " + ", ".join(f"{s.scenario} {s.messages}" for s in scores))
        for s in scores:
            if s.harm:
                print(f"severity and burn, {s.scenario}: {s.harm_text}")
        if skipped:
            print(f"skipped, history-only faults cannot be injected live: {'; '.join(skipped)}")
        on = sorted({s.mode.removeprefix("replay/") for s in unjudged})  # a scenario may say its telemetry
        print(f"{passed} passed, {failed} failed" + (f", {len(unjudged)} cannot be judged on {', '.join(on)} "
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
    replay.add_argument("--shard", action="append", default=[], metavar="MATCHERS",
                        help="split the fleet over sharded analyzers sharing one store, one per --shard "
                        "(PromQL label matchers, as analyzer.ha.selector: node=\"n1\"); give the shards "
                        "so that together they cover the fleet")
    replay.add_argument("--incremental", action="store_true",
                        help="run the analyzer's own incremental detection in every replayed cycle, as the "
                        "daemon does (live window, same-time windows, baselines for new rows only), instead "
                        "of detecting once over the whole history; about 20 times the CPU")
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
