"""Replay a scenario through the analyzer in accelerated time: history → signals → detection →
the daemon's cycles (correlation, diagnosis, incident lifecycle), without Prometheus, on replayed time.

Used by ``oximeter drill --replay`` and the benches. Detection runs once over the whole history
(:mod:`drills.detected`), and the daemon's cycle then steps through it every ``interval_s``; or,
in :func:`replay_live`, the daemon's own incremental detection runs in each cycle.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pandas as pd

from analyzer.detection.baselines import BaselinePolicy
from analyzer.detection.events import AnomalyEvent
from analyzer.diagnosis.burn import burn_specs
from analyzer.diagnosis.topology import Topology
from analyzer.incidents.lifecycle import Change, Incident, IncidentSettings
from analyzer.incidents.maintenance import MaintenanceWindow
from analyzer.incidents.store import IncidentQuery, IncidentStore
from analyzer.service.daemon import Analyzer
from analyzer.service.pipeline import CONTEXT, CyclePipeline, Pipeline, topology_from_frames
from analyzer.service.settings import AnalyzerSettings
from analyzer.signals.catalogue import CATALOGUE
from analyzer.signals.frame import SeriesFrame
from analyzer.signals.raw import RawStore
from analyzer.signals.slo import SloSettings
from analyzer.signals.sources.base import ReplayClock
from analyzer.signals.sources.frames import FrameSource
from analyzer.signals.sources.stock import read_history
from analyzer.signals.spec import SignalSpec
from drills.detected import DEFAULT_SLOS, DetectedPipeline, detect, signal_frames
from drills.harm import BurnReader, harm_lines
from drills.history import DAY_S, drill_windows, history_dir, maintenance_windows, prepare, same_time_window
from drills.score import DrillScore, expected_truths, score
from drills.stock import why_stock_cannot_judge
from oximeter.store import connect


@dataclass(frozen=True)
class ReplayOutcome:
    """Every incident the replayed daemon opened (in its last state) and every notify-worthy change."""

    incidents: tuple[Incident, ...]
    changes: tuple[Change, ...]
    # Incidents opened during a maintenance window (their opening not told then), by id.
    suppressed: tuple[str, ...] = ()


class Told:
    """The notifier of a replay: it keeps every change the daemon hands over, in order."""

    def __init__(self) -> None:
        self.changes: list[Change] = []

    def notify(self, change: Change, incident: Incident | None) -> None:
        """Keep the change."""
        self.changes.append(change)

    def notice(self, key: str, text: str) -> None:
        """A replay's source never fails: nothing to keep."""


class Histories:
    """A replay's source over several histories (a drill window and the same-time windows before
    it): each fetch is answered by the history that holds most of its span, as one Prometheus
    holding all of them would answer."""

    def __init__(self, raws: Sequence[RawStore], clock: Callable[[], datetime]) -> None:
        self._parts = [(r.index[0], r.index[-1], FrameSource(raw=r, clock=clock)) for r in raws]
        self._clock = clock

    def now(self) -> datetime:
        """The replayed present."""
        return self._clock()

    def query_key(self, spec: SignalSpec) -> Hashable:
        """Every history answers a query the same way: the first one's key."""
        return self._parts[0][2].query_key(spec)

    def fetch(self, spec: SignalSpec, start: datetime, end: datetime, step_s: float) -> SeriesFrame:
        """``spec`` on the aligned grid [start, end], from the history that overlaps it most."""
        lo, hi = pd.Timestamp(start), pd.Timestamp(end)
        part = max(self._parts, key=lambda p: min(hi, p[1]) - max(lo, p[0]))
        return part[2].fetch(spec, start, end, step_s)


def _run(pipeline: Pipeline, clock: ReplayClock, elapsed: list[float], end: datetime, interval_s: float,
         store: IncidentStore, settings: IncidentSettings, topology: Topology,
         catalogue: Mapping[str, SignalSpec], unreadable: frozenset[str], not_judged: Sequence[str],
         maintenance: Sequence[MaintenanceWindow], slos: SloSettings | None) -> ReplayOutcome:
    """The daemon's own cycle (:class:`analyzer.service.daemon.Analyzer`: findings, tracker, store,
    notifier) every ``interval_s`` of replayed time until ``end``."""
    told = Told()
    try:
        analyzer = Analyzer(pipeline, store, settings, topology, told, clock.now, catalogue=catalogue,
                            unreadable=unreadable, not_judged=not_judged, maintenance=maintenance, slos=slos)
        while clock.now() + timedelta(seconds=interval_s) <= end:
            elapsed[0] += interval_s
            analyzer.cycle()
        incidents = store.query(IncidentQuery(limit=10_000), clock.now())
        suppressed = tuple(analyzer.oncall.opened_suppressed())
    finally:
        store.conn.close()
    return ReplayOutcome(tuple(sorted(incidents, key=lambda i: (i.first_onset, i.id))), tuple(told.changes),
                         suppressed)


def _replay_clock(start: datetime) -> tuple[ReplayClock, list[float]]:
    """Replayed time that advances by one interval per cycle, however long the cycle took."""
    elapsed = [0.0]
    return ReplayClock(start, speed=1.0, monotonic=lambda: elapsed[0]), elapsed


def replay_cycles(frames: Mapping[str, SeriesFrame], events: Sequence[AnomalyEvent], interval_s: float,
                  settings: IncidentSettings | None = None,
                  topology: Topology | None = None,
                  catalogue: Mapping[str, SignalSpec] = CATALOGUE,
                  unreadable: frozenset[str] = frozenset(), not_judged: Sequence[str] = (),
                  maintenance: Sequence[MaintenanceWindow] = (),
                  slos: SloSettings | None = DEFAULT_SLOS) -> ReplayOutcome:
    """The daemon's own cycle every ``interval_s`` of replayed time over the whole history, on
    events detected beforehand (``catalogue``: the one the events were detected with, which also
    says which signals open incidents; ``unreadable`` and ``not_judged``: what the inputs cannot
    feed, as the daemon is told; ``maintenance``: the windows the daemon is told of, as its config's;
    ``slos``: the objectives severity follows, whose burn counts ``frames`` hold)."""
    indexes = [f.values.index for f in frames.values() if len(f.values.index)]
    if not indexes:
        return ReplayOutcome((), ())
    start, end = indexes[0][0].to_pydatetime(), indexes[0][-1].to_pydatetime()
    clock, elapsed = _replay_clock(start)
    # oximeter_target_info's series are the same every cycle of a replay: joined once.
    joined = topology_from_frames(frames, topology or Topology())
    return _run(DetectedPipeline(frames, events), clock, elapsed, end, interval_s,
                IncidentStore(connect(":memory:")), settings or IncidentSettings(), joined, catalogue,
                unreadable, not_judged, maintenance, slos)


def replay_live(history: Path | RawStore, interval_s: float, settings: IncidentSettings | None = None,
                catalogue: Mapping[str, SignalSpec] = CATALOGUE, policy: BaselinePolicy | None = None,
                same_time: Mapping[float, Path | RawStore] | None = None, *, stock: bool = False,
                maintenance: Sequence[MaintenanceWindow] = (),
                slos: SloSettings | None = DEFAULT_SLOS) -> ReplayOutcome:
    """One history (a directory, or its raw series) through the daemon's own incremental detection
    (:class:`~analyzer.service.pipeline.CyclePipeline`) over the history and the same-time
    histories before it, every ``interval_s`` of replayed time (arguments as :func:`replay_history`)."""
    raw = read_history(history, stock=stock)
    start, end = raw.index[0].to_pydatetime(), raw.index[-1].to_pydatetime()
    clock, elapsed = _replay_clock(start)
    source = Histories([raw, *(read_history(d, stock=stock) for d in (same_time or {}).values())], clock.now)
    inputs = AnalyzerSettings(inputs="stock" if stock else "oximeter")
    store = IncidentStore(connect(":memory:"))
    context = {**CONTEXT, **burn_specs(slos)} if slos is not None else CONTEXT
    pipeline = CyclePipeline(source, catalogue, float(raw.step_s), inputs.live_window_s,
                             policy=policy or BaselinePolicy(), change_events=store.change_events,
                             context_specs=context)
    return _run(pipeline, clock, elapsed, end, interval_s, store, settings or IncidentSettings(), Topology(),
                catalogue, inputs.unreadable_context(), inputs.not_judged(), maintenance, slos)


def replay_history(directory: Path, interval_s: float, settings: IncidentSettings | None = None,
                   catalogue: Mapping[str, SignalSpec] = CATALOGUE, policy: BaselinePolicy | None = None,
                   same_time: Mapping[float, Path] | None = None, *, stock: bool = False,
                   maintenance: Sequence[MaintenanceWindow] = ()) -> ReplayOutcome:
    """One history directory, end to end (``same_time``: lag_s → the history that long before;
    ``stock``: a stock fleet's history, see :func:`signal_frames`; ``maintenance``: the windows
    the analyzer is told of)."""
    frames, step_s = signal_frames(directory, catalogue, stock=stock)
    lagged = {lag: signal_frames(d, catalogue, stock=stock)[0] for lag, d in (same_time or {}).items()}
    hold_s = (settings or IncidentSettings()).resolve_after_s
    inputs = AnalyzerSettings(inputs="stock" if stock else "oximeter")
    return replay_cycles(frames, detect(frames, step_s, catalogue, policy, lagged, hold_s), interval_s,
                         settings, catalogue=catalogue, unreadable=inputs.unreadable_context(),
                         not_judged=inputs.not_judged(), maintenance=maintenance)


def replay_sharded(directory: Path, interval_s: float, selectors: Sequence[str],
                   catalogue: Mapping[str, SignalSpec], same_time: Mapping[float, Path], *, stock: bool,
                   maintenance: Sequence[MaintenanceWindow] = ()) -> ReplayOutcome:
    """``replay_history`` split over shards, as ``analyzer.ha`` shards run: one analyzer per
    selector, reading only the series it matches (its own detection, baselines and topology),
    tracking and telling only its shard's incidents, all on one store that holds the whole
    fleet's; their cycles interleave on one replayed clock. A stock fleet's series are translated
    over the whole fleet first, as its Prometheus evaluates the adapter rules, so each shard selects
    among the records the analyzer reads: a kube-state-metrics container's restarts carry its pod's
    node (joined through kube_pod_info), a dcgm-exporter GPU its Hostname's."""
    settings = IncidentSettings()
    inputs = AnalyzerSettings(inputs="stock" if stock else "oximeter")

    raw = read_history(directory, stock=stock)
    lagged_raw = {lag: read_history(d, stock=stock) for lag, d in same_time.items()}
    conn = connect(":memory:")
    told = Told()
    analyzers: list[Analyzer] = []
    start = end = None
    try:
        elapsed = [0.0]
        for n, selector in enumerate(selectors):
            frames, step_s = signal_frames(raw.only(selector), catalogue)
            lagged = {lag: signal_frames(r.only(selector), catalogue)[0] for lag, r in lagged_raw.items()}
            events = detect(frames, step_s, catalogue, None, lagged, settings.resolve_after_s)
            indexes = [f.values.index for f in frames.values() if len(f.values.index)]
            if not indexes:
                continue
            if start is None:
                start, end = indexes[0][0].to_pydatetime(), indexes[0][-1].to_pydatetime()
            clock = ReplayClock(start, speed=1.0, monotonic=lambda: elapsed[0])
            analyzers.append(Analyzer(
                DetectedPipeline(frames, events), IncidentStore(conn, f"shard-{n}"), settings,
                topology_from_frames(frames, Topology()), told, clock.now, catalogue=catalogue,
                unreadable=inputs.unreadable_context(), not_judged=inputs.not_judged(),
                maintenance=maintenance, slos=DEFAULT_SLOS))
        if start is None or end is None:
            return ReplayOutcome((), ())
        now = start
        while now + timedelta(seconds=interval_s) <= end:
            elapsed[0] += interval_s
            now = start + timedelta(seconds=elapsed[0])
            for analyzer in analyzers:
                analyzer.cycle()
        incidents = IncidentStore(conn).query(IncidentQuery(limit=10_000), now)
        suppressed = tuple(i for a in analyzers for i in a.oncall.opened_suppressed())
    finally:
        conn.close()
    return ReplayOutcome(tuple(sorted(incidents, key=lambda i: (i.first_onset, i.id))), tuple(told.changes),
                         suppressed)


# -- drills ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Replayed:
    """A scenario's drill windows replayed: what the analyzer opened and told, and the truth."""

    incidents: list[dict[str, Any]]  # the API's JSON shape
    told: list[Any]  # the notify-worthy changes (analyzer.incidents.lifecycle.Change), in order
    faults: list[dict[str, Any]]  # truth.json's faults, with absolute start/end epochs
    days: float  # simulated time replayed, all windows together
    suppressed: list[str] = field(default_factory=list)  # incidents opened during maintenance
    # Each window's burn counts with the faults it holds, to measure the faults' harm (drills/harm.py).
    burns: list[tuple[BurnReader, list[dict[str, Any]]]] = field(default_factory=list)


def replay_windows(sc: Any, cache_dir: Path, step_s: float, interval_s: float,
                   shards: Sequence[str] = (), *, incremental: bool = False) -> Replayed:
    """Every drill window of scenario ``sc`` (generated or cached) through the daemon's cycles
    (``shards``: one analyzer per selector on one store instead of one over the whole fleet;
    ``incremental``: the daemon's own incremental detection in every cycle, :func:`replay_live`)."""
    from analyzer.incidents.lifecycle import NOTIFY_KINDS

    stock = sc.telemetry == "stock"
    # Stock inputs leave out the signals nothing feeds, as the analyzer does on them.
    catalogue = AnalyzerSettings(inputs="stock" if stock else "oximeter").catalogue()
    incidents: list[dict[str, Any]] = []
    told: list[Any] = []
    faults: list[dict[str, Any]] = []
    suppressed: list[str] = []
    burns: list[tuple[BurnReader, list[dict[str, Any]]]] = []
    days = 0.0
    maintenance = maintenance_windows(sc)
    for window in drill_windows(sc, step_s=step_s):
        directory = history_dir(window, cache_dir, step_s)
        yesterday = history_dir(same_time_window(window), cache_dir, step_s)
        held = json.loads((directory / "truth.json").read_text(encoding="utf-8"))["faults"]
        faults += held
        burns.append((BurnReader(directory, DEFAULT_SLOS, stock=stock), held))
        if shards:
            outcome = replay_sharded(directory, interval_s, shards, catalogue, {DAY_S: yesterday},
                                     stock=stock, maintenance=maintenance)
        else:
            replay = replay_live if incremental else replay_history
            outcome = replay(directory, interval_s, catalogue=catalogue, same_time={DAY_S: yesterday},
                             stock=stock, maintenance=maintenance)
        suppressed += outcome.suppressed
        incidents += [i.to_dict() for i in outcome.incidents]
        # Replay has no Alertmanager: chat's messages are the incidents' told changes.
        told += [c for c in outcome.changes if c.kind in NOTIFY_KINDS]
        days += window.days
    return Replayed(incidents, told, faults, days, suppressed, burns)


def load_drill_scenario(path: Path, trace: tuple[str, float] | None = None, inputs: str = "oximeter") -> Any:
    """The scenario at ``path``; with ``trace`` (file, peak utilisation), its traffic replayed from it;
    ``inputs``: the telemetry the fleet presents (``stock``: no gateway, stock exporters)."""
    from simulator.scenario import load_scenario, with_trace

    sc = load_scenario(path)
    sc = sc if trace is None else with_trace(sc, *trace)
    return sc if inputs == "oximeter" else sc.model_copy(update={"telemetry": inputs})


def replay_drill(path: Path, cache_dir: Path, step_s: float, interval_s: float,
                 trace: tuple[str, float] | None = None, inputs: str = "oximeter",
                 shards: Sequence[str] = (), *, incremental: bool = False) -> DrillScore:
    """The scenario's windows replayed through the analyzer (or sharded analyzers; ``incremental``:
    its own incremental detection each cycle), scored; a stock drill that fails says whether stock
    telemetry could have judged it (:mod:`drills.stock`)."""
    from analyzer.incidents.stability import message_budget

    sc = load_drill_scenario(path, trace, inputs)
    run = replay_windows(sc, cache_dir, step_s, interval_s, shards, incremental=incremental)
    budget = sum(message_budget(c.kind for c in run.told if c.incident_id == i["id"]) for i in run.incidents)
    starts = [f["start_epoch_s"] for f in run.faults]
    start = datetime.fromtimestamp(min(starts), tz=UTC) if starts else None
    expected = expected_truths(sc.truth.model_dump(), [a.model_dump() for a in sc.also])
    # The fleet's telemetry: --inputs, or what the scenario itself says (``telemetry: stock``).
    mode = "replay" if sc.telemetry == "oximeter" else f"replay/{sc.telemetry}"
    verdict = score(sc.name, mode, expected, run.incidents, start, len(run.told), budget)
    harm = harm_lines(expected, run.incidents, run.burns, interval_s)
    verdict = replace(verdict, harm=harm)
    if verdict.passed and not all(line["follows"] for line in harm):
        verdict = replace(verdict, passed=False,
                          reason=f"severity does not follow the burn: {verdict.harm_text}")
    if sc.maintenance:
        verdict = replace(verdict, suppressed=len(run.suppressed))
    if verdict.passed or sc.telemetry == "oximeter":
        return verdict
    # Replayed again on Oximeter's telemetry (whatever the scenario file says the fleet runs): which
    # incidents named the fault there, and from what.
    own = load_drill_scenario(path, trace).model_copy(update={"telemetry": "oximeter"})
    own_run = replay_windows(own, cache_dir, step_s, interval_s, incremental=incremental)
    return replace(verdict, cannot_judge=why_stock_cannot_judge(own, own_run.incidents))


def prepare_drill_windows(paths: Sequence[Path], cache_dir: Path, step_s: float, jobs: int,
                          trace: tuple[str, float] | None = None, inputs: str = "oximeter") -> None:
    """Every drill window of the scenarios and the fault-free day before each, generated `jobs` at a time."""
    windows = [w for p in paths for w in drill_windows(load_drill_scenario(p, trace, inputs), step_s=step_s)]
    windows += [same_time_window(w) for w in windows]
    prepare(windows, cache_dir, step_s, jobs)
