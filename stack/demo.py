"""``oximeter demo``: the whole stack on 127.0.0.1 with a simulated fleet, then a fault drill.

Set-up (rich progress bars): two days of history backfilled into a fresh Prometheus, then
Prometheus with time-scaled alert rules, Alertmanager routing to the analyzer's relay, Redis, the
simulator, an exporter and a gateway per node, the analyzer daemon (config generated into the
workspace) and traffic; a chat sink in this process prints each WeCom message as a panel. The
drill injects the scenario's faults through the simulator's admin API, follows the incident from
opened to resolved through the analyzer API, and previews the daily digest. Every child process
is stopped on exit, on errors and on Ctrl-C or SIGTERM during set-up.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import secrets
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType

from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console
from rich.panel import Panel
from rich.progress import Progress, SpinnerColumn, TaskID, TextColumn, TimeElapsedColumn

from oximeter.errors import OximeterError
from reporter.sink import ChatSink, SinkMessage
from stack.backfill import BackfillSpec
from stack.demo_stack import (
    ALERT_GROUP_WAIT_S,
    DEMO_SCALE,
    DemoDrill,
    IncidentWatch,
    analyzer_addon,
    describe_incident,
    drill_faults,
    prebuild_backfill,
)
from stack.local import Endpoints, Stack, StackError, StackOptions
from stack.procs import oximeter_argv, wait_until
from stack.vllm.engine import EngineSpec, VllmEngine

DEFAULT_WORKSPACE = Path(".oximeter/demo")
DASHBOARDS = Path(__file__).resolve().parent.parent / "dashboards" / "build"
# A finished backfill younger than this is reused: its "yesterday" still covers today's baselines.
BACKFILL_REUSE_S = 6 * 3600.0
# Context length of the demo's real engines: the traffic generator's longest prompts, in the tiny
# model's 512-token vocabulary, plus their answers.
VLLM_DEMO_MODEL_LEN = 8192
# The demo's prompts for engines on CPUs: a tenth of a GPU chat mix's, so that a healthy engine's
# time to first token is within the objective (a full-length prompt takes seconds to prefill there).
VLLM_PROMPT_SCALE = 0.1
# Requests a second per real engine: half the simulated fleet's, as every process of the stack shares
# the host's CPUs with the engines, and a node catching up after a hang must not starve the others.
VLLM_RPS_PER_NODE = 0.5
# How long the hang drill waits for requests running in the engine it hangs (traffic has just begun).
HANG_WAIT_S = 120.0
# How long a stopped engine core's last stats report may take to reach its API server.
STOP_SETTLE_S = 0.5


def configure(parser: argparse.ArgumentParser) -> None:
    """Add ``demo`` arguments."""
    parser.add_argument("--scenario", default="thermal_throttle",
                        help="drill scenario from the library (simulator/scenarios), or a YAML path")
    parser.add_argument("--duration", type=float, default=None,
                        help="seconds to run once set up (default: until Ctrl-C)")
    parser.add_argument("--fault-s", type=float, default=60.0, help="how long the drill's fault lasts")
    parser.add_argument("--backfill-days", type=float, default=2.0, help="days of history backfilled first")
    parser.add_argument("--backfill-step", type=float, default=120.0,
                        help="seconds between backfilled samples (a rate over 5 minutes needs ≤ 150)")
    parser.add_argument("--workspace", type=Path, default=DEFAULT_WORKSPACE)
    parser.add_argument("--engine", choices=("sim", "vllm"), default="sim",
                        help="the engines behind the gateways: the simulator's (default), or real vLLM "
                             "engines (its CPU build, docs/real-vllm.md) whose engine core the drill hangs "
                             "for --fault-s (no history, no GPU telemetry)")
    parser.set_defaults(func=run)


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    def handler(_signum: int, _frame: FrameType | None) -> None:
        raise KeyboardInterrupt
    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class _ProgressObserver:
    """One progress line per start step."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress
        self.tasks: dict[str, TaskID] = {}

    def step(self, name: str, detail: str) -> None:
        self.tasks[name] = self.progress.add_task(detail, total=None)

    def done(self, name: str) -> None:
        self.progress.update(self.tasks[name], total=1, completed=1)


def _backfill_dir(workspace: Path, spec: BackfillSpec) -> Path:
    """The workspace's backfill folder, emptied when its history ended too long ago to be "yesterday"."""
    folder = workspace / "backfill"
    manifest = folder / "backfill.json"
    if manifest.is_file():
        done = json.loads(manifest.read_text(encoding="utf-8"))
        if time.time() - float(done.get("end_s", 0)) > BACKFILL_REUSE_S:
            manifest.unlink()  # build_backfill starts over without a manifest
    return folder


def run(args: argparse.Namespace) -> int:
    """Set up, drill, show, and stop everything."""
    console = Console()
    started = time.monotonic()
    workspace: Path = args.workspace.resolve()
    workspace.mkdir(parents=True, exist_ok=True)
    for old in workspace.glob("oximeter.db*"):
        old.unlink()  # incidents of an earlier run would re-open against a fresh Prometheus
    vllm = args.engine == "vllm"
    try:
        drill = None if vllm else DemoDrill.from_scenario(args.scenario, fault_s=args.fault_s)
    except OximeterError as exc:
        console.print(f"[red]oximeter demo: {exc}[/]")
        return 2
    sink = ChatSink(lambda m: _print_message(m, console))
    token_file = workspace / "relay.token"
    token_file.write_text(secrets.token_urlsafe(24), encoding="utf-8")
    token_file.chmod(0o600)
    spec = BackfillSpec(days=args.backfill_days, step_s=args.backfill_step)
    backfill_dir = _backfill_dir(workspace, spec)
    options = StackOptions(
        nodes=spec.nodes, gpus_per_node=spec.gpus_per_node, time_scale=DEMO_SCALE, scrape_interval_s=2.0,
        eval_interval_s=2.0,
        lookback_delta_s=300 / DEMO_SCALE, backfill=spec, backfill_dir=backfill_dir,
        alert_group_wait_s=ALERT_GROUP_WAIT_S, alert_group_interval_s=5.0,
        alert_repeat_interval_s=3600.0, relay_token_file=token_file,
        # Real engines hang for real: their incidents are not marked as built from simulated targets.
        addons=(analyzer_addon(workspace, sink.url, token_file, simulated=not vllm),))
    if vllm:
        # Real engines make their own history from now on; their prompts (the traffic generator's,
        # a few hundred words with a shared prefix) need a longer context than the tests' engine.
        options = dataclasses.replace(options, backfill=None, backfill_dir=None, daily_shape=False,
                                      prompt_scale=VLLM_PROMPT_SCALE, traffic_rps_per_node=VLLM_RPS_PER_NODE,
                                      vllm=EngineSpec(max_model_len=VLLM_DEMO_MODEL_LEN))
    progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                        console=console)
    observer = _ProgressObserver(progress)
    stack = Stack(workspace, options, observer)
    with _sigterm_as_interrupt():
        try:
            sink.start()
            with progress:
                history_s = 0.0
                if not vllm:
                    observer.step("history", f"{spec.days:g} days of history for {spec.nodes} nodes, every "
                                             f"{spec.step_s:g} s (reused for {BACKFILL_REUSE_S / 3600:g} h)")
                    t0 = time.monotonic()
                    prebuild_backfill(spec, backfill_dir)
                    history_s = time.monotonic() - t0
                    observer.done("history")
                endpoints = stack.start()
            steps = {"history": history_s, **stack.timings_s} if not vllm else dict(stack.timings_s)
            console.print(f"set up in {time.monotonic() - started:.0f} s: "
                          + ", ".join(f"{k} {v:.0f} s" for k, v in steps.items()))
            _print_endpoints(endpoints, workspace, console, vllm)
            deadline = None if args.duration is None else time.monotonic() + args.duration
            if drill is None:
                _hang_drill(stack, args.fault_s, deadline, console)
            else:
                _drill(stack, drill, deadline, console)
                _digest(endpoints, workspace, console)
            if deadline is None or time.monotonic() < deadline:
                left = "" if deadline is None else f" for {deadline - time.monotonic():.0f} s more"
                console.print(f"running{left}; Ctrl-C stops everything")
                while deadline is None or time.monotonic() < deadline:
                    time.sleep(min(1.0, max(0.0, deadline - time.monotonic())) if deadline else 1.0)
        except OximeterError as exc:
            console.print(f"[red]oximeter demo: {exc}[/]")
            if not isinstance(exc, StackError):
                console.print(f"logs in {workspace / 'logs'}")
            return 1
        except KeyboardInterrupt:
            console.print("[yellow]interrupted[/]")
        finally:
            stack.stop()
            sink.stop()
            console.print(f"stopped every process after {time.monotonic() - started:.0f} s; "
                          f"logs in {workspace / 'logs'}")
            console.print(f"chat messages: {_chat_count(sink.messages)}")
    return 0


def _drill(stack: Stack, drill: DemoDrill, deadline: float | None, console: Console) -> None:
    """Inject, then report the incident as it opens and resolves (or the deadline passes)."""
    assert stack.endpoints is not None
    api = stack.endpoints.addons["analyzer"]
    watch = IncidentWatch(api)
    console.rule(f"[bold]drill: {drill.description}")
    t0 = time.monotonic()
    for spec, fault in zip(drill.faults, drill_faults(drill, stack.nodes, stack.options.gpus_per_node),
                           strict=True):
        stack.fault(fault.kind, fault.node, gpu=fault.gpu, strength=fault.strength,
                    duration_s=fault.duration_s)
        where = f"{fault.node}" + (f" GPU {fault.gpu}" if fault.gpu is not None else "")
        if (spec["node"], spec.get("gpu")) != (fault.node, fault.gpu):
            # The scenario names a place this smaller fleet lacks: say where it went instead.
            scenario_gpu = f" GPU {spec['gpu']}" if spec.get("gpu") is not None else ""
            where += f" (the scenario's {spec['node']}{scenario_gpu}, on this fleet)"
        console.print(f"injected {fault.kind} on {where} for {fault.duration_s:.0f} s "
                      f"(strength {fault.strength}) at {datetime.now(UTC):%H:%M:%S} UTC")
    limit = time.monotonic() + drill.fault_s + 240.0
    if deadline is not None:
        limit = min(limit, deadline)
    _watch(watch, t0, limit, drill.fault_s, console)
    if not watch.seen:
        console.print("[red]no incident within the time left[/]")


def _watch(watch: IncidentWatch, t0: float, limit: float, fault_s: float, console: Console) -> None:
    """Print incidents as they open and resolve, until all have resolved after the fault, or ``limit``."""
    while time.monotonic() < limit:
        for incident, what in watch.poll():
            console.print(Panel(describe_incident(incident), title=f"incident {what} after "
                                f"{time.monotonic() - t0:.0f} s", border_style="red" if what == "opened"
                                else "green"))
        if watch.seen and all(i["state"] == "resolved" for i in watch.seen.values()) \
                and time.monotonic() - t0 > fault_s:
            break
        time.sleep(1.0)


def _hang_drill(stack: Stack, fault_s: float, deadline: float | None, console: Console) -> None:
    """Hang the last node's vLLM engine core (SIGSTOP: its API server still answers /health) for
    ``fault_s`` while traffic runs, then let it go on; report the incidents meanwhile."""
    assert stack.endpoints is not None
    node = stack.nodes[-1]
    engine = stack.vllm_engines[node]
    watch = IncidentWatch(stack.endpoints.addons["analyzer"])
    console.rule(f"[bold]drill: {node}'s vLLM engine core hangs for {fault_s:.0f} s")
    # A hang while the engine runs requests: those it holds are what it stops serving.
    try:
        pid = wait_until(lambda: _stop_while_running(engine), HANG_WAIT_S, interval_s=0.2,
                         what=f"{node}'s engine core stopped while it runs requests")
    except TimeoutError as exc:
        raise StackError(str(exc)) from None
    t0 = time.monotonic()
    console.print(f"stopped {node}'s engine core (pid {pid}) at {datetime.now(UTC):%H:%M:%S} UTC; "
                  f"its /health still answers")
    limit = t0 + fault_s + 240.0 if deadline is None else min(t0 + fault_s + 240.0, deadline)
    try:
        _watch(watch, t0, min(t0 + fault_s, limit), fault_s, console)
    finally:
        engine.signal_engine_core(signal.SIGCONT)
    console.print(f"{node}'s engine core resumed after {time.monotonic() - t0:.0f} s")
    _watch(watch, t0, limit, fault_s, console)
    if not watch.seen:
        console.print("[red]no incident within the time left[/]")


def _stop_while_running(engine: VllmEngine) -> int:
    """Stop the engine core if it runs requests and its last report, once stopped, says it still
    does (it may have finished them in between); its pid, or 0 after resuming it to try again."""
    if _running(engine) <= 0:
        return 0
    pid = engine.signal_engine_core(signal.SIGSTOP)
    # The reports already on their way arrive within the settling time; none follows a stopped core.
    time.sleep(STOP_SETTLE_S)
    if _running(engine) > 0:
        return pid
    engine.signal_engine_core(signal.SIGCONT)
    return 0


def _running(engine: VllmEngine) -> float:
    """The requests ``engine`` runs now, from its own ``vllm:num_requests_running``."""
    families = text_string_to_metric_families(engine.metrics())
    return sum(sample.value for family in families if family.name == "vllm:num_requests_running"
               for sample in family.samples)


def _digest(ep: Endpoints, workspace: Path, console: Console) -> None:
    """``oximeter report --dry-run`` against the demo Prometheus (yesterday = the backfill)."""
    out = workspace / "digest-preview"
    result = subprocess.run(oximeter_argv("--config", str(workspace / "oximeter.yaml"), "report", "--dry-run",
                                          "--prometheus", ep.prometheus, "--out", str(out)),
                            capture_output=True, text=True, timeout=120, check=False)
    text = result.stdout.strip() or result.stderr.strip()
    console.print(Panel(text[-3000:], title=f"daily digest (dry run) — files in {out}",
                        border_style="blue" if result.returncode == 0 else "red"))


def _chat_count(messages: Sequence[SinkMessage]) -> str:
    """``5 (3 incident, 1 alert, 1 digest)``: what the chat received, by kind (an image is the
    digest's chart, sent beside its text)."""
    kinds: dict[str, int] = {}
    for message in messages:
        head = message.text.strip().split("\n", 1)[0]
        kind = "digest" if message.msgtype == "image" or "Daily health digest" in head else \
            "alert" if "[FIRING:" in head or "[RESOLVED:" in head else "incident"
        kinds[kind] = kinds.get(kind, 0) + 1
    parts = ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items()))
    return f"{len(messages)}" + (f" ({parts})" if parts else "")


def _print_message(message: SinkMessage, console: Console) -> None:
    console.print(Panel(message.text, title=f"WeCom robot ({message.msgtype})", border_style="cyan"))


def _print_endpoints(ep: Endpoints, workspace: Path, console: Console, vllm: bool = False) -> None:
    if vllm:
        console.print("[bold]REAL vLLM[/] (CPU build, tiny model with random weights): no GPU, so no GPU "
                      "telemetry; gateways, exporters (host only), Prometheus, Alertmanager and the analyzer "
                      "are the real thing.")
    else:
        console.print("[bold]SIMULATION[/]: engines and GPUs are simulated; gateways, exporters, "
                      "Prometheus, Alertmanager and the analyzer are the real thing.")
    console.print(f"  Prometheus UI:  {ep.prometheus}/alerts")
    if ep.alertmanager:
        console.print(f"  Alertmanager:   {ep.alertmanager}")
    api = ep.addons["analyzer"]
    console.print(f"  analyzer API:   {api}/api/incidents  (OpenAPI {api}/openapi.json, "
                  f"metrics {api}/metrics)")
    for node, url in ep.gateways.items():
        exporter = f"exporter {ep.exporters[node]}/metrics  " if node in ep.exporters else ""
        console.print(f"  {node}: gateway {url}/v1/chat/completions  metrics {url}/metrics  "
                      f"{exporter}engine {ep.engines[node]}/metrics")
    console.print(f"  dashboards JSON: {DASHBOARDS} (oximeter dashboards build)")
    console.print(f"  workspace: {workspace} (config oximeter.yaml, logs/, store oximeter.db)")
