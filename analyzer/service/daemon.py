"""``oximeter analyze``: every interval detect, correlate, diagnose, store and notify; serve the API.

Detection is ``analyzer/service/pipeline.py``'s CyclePipeline: a SignalCycle per signal, so live cycles
compare with the same time 1 d / 7 d back and the recent past, fetching only what is new.
The cycle is synchronous (pandas) and runs in a worker thread so the aiohttp API on the same
event loop stays responsive; both share one SQLite connection behind ``lock_for``. A source that
cannot be read sets ``oximeter_analyzer_source_up`` to 0, backs off, sends one "analyzer cannot
see" notice per outage and recovers by itself. SIGTERM finishes the cycle in flight, then stops.

One active analyzer per shard: the tracker's state is in-process, so two daemons writing one
store would open the same incident twice. By default a second one on the same store is refused,
naming the first (``oximeter/store_lock.py``); with ``analyzer.ha`` several share it, one leading
by lease and the others standing by (``analyzer/service/leadership.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sqlite3
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Protocol

import requests
from aiohttp import web
from loguru import logger
from prometheus_client import generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from analyzer.diagnosis.burn import burns
from analyzer.diagnosis.burn_events import BurnWatch
from analyzer.diagnosis.topology import Topology
from analyzer.incidents.harm import graded
from analyzer.incidents.lifecycle import IncidentSettings, IncidentTracker, findings
from analyzer.incidents.maintenance import MaintenanceStore, MaintenanceWindow
from analyzer.incidents.oncall import OnCall
from analyzer.incidents.store import IncidentStore
from analyzer.service.api import build_app, start_api
from analyzer.service.blindness import BlindWatch, gpu_absent_text
from analyzer.service.daemon_metrics import DaemonMetrics, Notifier
from analyzer.service.leadership import Leadership
from analyzer.service.pipeline import CyclePipeline, Pipeline, topology_from_frames
from analyzer.service.unsaved import Unsaved
from analyzer.signals.catalogue import CATALOGUE
from analyzer.signals.frame import SeriesFrame
from analyzer.signals.slo import SloSettings
from analyzer.signals.spec import SignalSpec
from oximeter.errors import OximeterError
from oximeter.ports import write_port_file
from oximeter.secrets import read_secret

if TYPE_CHECKING:
    pass


class ApiLinks(Protocol):
    """Where chat links point: set to the API's address once the kernel has picked its port."""

    api_url: str


class Companion(Protocol):
    """What runs in the daemon's process beside the cycle (the reporter, wired by the command that
    starts both): its routes on the API, and a task until ``stop``."""

    @property
    def settings(self) -> ApiLinks: ...

    def mount(self, app: web.Application) -> None: ...

    async def run(self, stop: asyncio.Event) -> None: ...


SOURCE_ERRORS = (OximeterError, OSError, requests.RequestException)


class Analyzer:
    """The cycle: pipeline → findings → tracker → store → notifier, with source health.

    ``catalogue``: the signals the pipeline evaluates (config overrides applied); it also says
    which of them may open an incident.
    """

    def __init__(self, pipeline: Pipeline, store: IncidentStore, settings: IncidentSettings,
                 topology: Topology, notifier: Notifier, clock: Callable[[], datetime],
                 metrics: DaemonMetrics | None = None,
                 catalogue: Mapping[str, SignalSpec] = CATALOGUE,
                 change_feed: Callable[[datetime], object] | None = None,
                 unreadable: frozenset[str] = frozenset(), not_judged: Sequence[str] = (),
                 maintenance: Sequence[MaintenanceWindow] = (), slos: SloSettings | None = None,
                 leadership: Leadership | None = None) -> None:
        self.pipeline, self.store, self.settings, self.catalogue = pipeline, store, settings, catalogue
        # Severity follows the harm these objectives measure (analyzer/incidents/harm.py); None: the rules'.
        self.slos = slos
        # Fast burns open an incident in the cycle they are seen (analyzer/diagnosis/burn_events.py).
        self.burn_watch = None if slos is None else BurnWatch(slos, settings.lookback_s)
        self.unreadable = unreadable  # context the inputs cannot feed (AnalyzerSettings.unreadable_context)
        # Records changes found in the telemetry itself (Kubernetes restarts and rollouts).
        self.change_feed = change_feed
        self.topology, self.notifier, self.clock = topology, notifier, clock
        self.metrics = metrics or DaemonMetrics()
        self.not_judged, self.leadership = tuple(not_judged), leadership
        self.tracker = IncidentTracker(settings, store.tracked(clock(), settings.reopen_window_s), not_judged)
        self.oncall = OnCall(store.conn)
        # The config's windows; those added at run time are read from the store every cycle.
        self.maintenance, self.maintenance_store = tuple(maintenance), MaintenanceStore(store.conn)
        self.source_down_since: datetime | None = None
        self.failures = 0
        self.blind_watch = BlindWatch()
        self.unsaved = Unsaved()

    def cycle(self) -> bool:
        """One cycle; returns whether the source could be read."""
        started, now = time.monotonic(), self.clock()
        try:
            events, frames = self.pipeline.run(now)
        except SOURCE_ERRORS as exc:
            self._source_down(now, exc)
            return False
        self._source_up(now)
        if self.leadership is not None and not self._lead(now):
            # Standing by: the windows are warm, nothing is opened or told, the leader's gauges count.
            self.metrics.update([], [])
            self.metrics.cycle.observe(time.monotonic() - started)
            return True
        self._blindness(now, frames)
        if self.change_feed is not None:
            try:
                self.change_feed(now)
            except (*SOURCE_ERRORS, sqlite3.Error) as exc:  # the signals were read: judge them, retry later
                logger.warning("analyzer: cannot read platform changes: {}", exc)
        topology = topology_from_frames(frames, self.topology)
        snapshot = self.pipeline.snapshot(frames, now)
        harm = burns(snapshot, self.slos) if self.slos is not None else []
        if self.burn_watch is not None:
            events = [*events, *self.burn_watch.events(harm, now)]
        found = findings(events, topology, now=now, snapshot=snapshot,
                         settings=self.settings, catalogue=self.catalogue, unreadable=self.unreadable)
        if self.slos is not None:
            found = graded(found, harm, self.slos)
        lookback = timedelta(seconds=self.settings.lookback_s + self.settings.reopen_window_s)
        windows = self.windows(now - lookback, now)
        # A declared change under a maintenance window is the planned work: expected, not evidence.
        declared = [c for c in self.store.change_events(now - lookback, now)
                    if not any(w.active(c.at) and w.covers_labels(dict(c.labels)) for w in windows)]
        # Resolved by hand first: the fault's detections this cycle then find it resolved, not open.
        by_hand, told = self.oncall.apply_resolves(self.tracker, now)
        changes, touched = self.tracker.step(found, now, declared)
        self.pipeline.remember(e for i in self.tracker.incidents if i.state == "open" for e in i.evidence)
        if self.unsaved.save(self.store, [*by_hand, *touched], [*told, *changes], now,
                             self.notifier.notify, self.notifier.notice):
            self.flush(now, windows)
        self.metrics.update(self.tracker.incidents, events)
        if isinstance(self.pipeline, CyclePipeline):  # a replay's detection ran ahead: nothing to learn
            self.metrics.update_learning(self.pipeline.learning())
        self.metrics.cycle.observe(time.monotonic() - started)
        return True

    def _lead(self, now: datetime) -> bool:
        assert self.leadership is not None
        leading, became = self.leadership.check()
        if became is not None:
            self.leadership.take_over(self.store, became, now)
            # What the previous leader stored is the truth now: its open incidents go on.
            tracked = self.store.tracked(now, self.settings.reopen_window_s)
            self.tracker = IncidentTracker(self.settings, tracked, self.not_judged)
            self.pipeline.remember(e for i in self.tracker.incidents if i.state == "open" for e in i.evidence)
        if leading:
            self.leadership.report_lapsed()
        self.metrics.leader.set(int(leading))
        return leading

    def windows(self, start: datetime, end: datetime) -> list[MaintenanceWindow]:
        """The maintenance windows overlapping ``[start, end]``, the config's and the store's."""
        return [*(w for w in self.maintenance if w.end > start and w.start <= end),
                *self.maintenance_store.overlapping(start, end)]

    def flush(self, now: datetime, windows: Sequence[MaintenanceWindow] | None = None) -> None:
        """Hand change records not yet emitted to the notifier (after a crash too), then mark them;
        first tell the incidents opened during maintenance that outlived their window."""
        windows = self.windows(now, now) if windows is None else windows
        for opening, incident in self.oncall.outlived(self.store, windows, now):
            self.notifier.notify(opening, incident)
        for change in self.store.pending_changes():
            held = self.oncall.hold_for(change, now, self.store.get(change.incident_id), windows)
            if held is None:
                self.notifier.notify(change, self.oncall.as_told(self.store, change.incident_id))
            else:
                self.oncall.hold(change, held, now)
            self.store.mark_emitted([change.key], now)

    def _blindness(self, now: datetime, frames: Mapping[str, SeriesFrame]) -> None:
        without_gpus = self.blind_watch.gpu_absent(frames, self.catalogue)
        if without_gpus:
            # Said once, in the next incident's opening message, rather than as a notice of its own.
            logger.warning("analyzer: no GPU telemetry from node(s) {}", ", ".join(without_gpus))
            self.not_judged = (*self.not_judged, gpu_absent_text(without_gpus))
            self.tracker.not_judged = self.not_judged
        self.metrics.blind.set(self.blind_watch.report(now, frames, self.catalogue, self.notifier.notice))

    def _source_down(self, now: datetime, exc: BaseException) -> None:
        self.metrics.source_up.set(0)
        self.failures += 1
        logger.error("analyzer: cannot read the source ({} failure(s) in a row): {}", self.failures, exc)
        if self.source_down_since is None:
            self.source_down_since = now
            self.notifier.notice(f"analyzer:source_down:{now:%Y%m%dT%H%M%S}",
                                 f"analyzer cannot see: the metrics source failed ({type(exc).__name__}); "
                                 "incidents are not being detected until it recovers")

    def _source_up(self, now: datetime) -> None:
        self.metrics.source_up.set(1)
        if self.source_down_since is not None:
            logger.info("analyzer: source back after {}", now - self.source_down_since)
        self.source_down_since, self.failures = None, 0

    def wait_s(self, interval_s: float) -> float:
        """The interval, doubled per consecutive source failure up to 5 minutes."""
        return interval_s if self.failures == 0 else min(300.0, interval_s * 2 ** min(self.failures, 8))


async def serve(analyzer: Analyzer, interval_s: float, host: str, port: int | None,
                token_env: str = "OXIMETER_API_TOKEN", reporting: Companion | None = None,
                port_file: str | None = None) -> None:
    """Run cycles until SIGTERM/SIGINT, with the API (and /metrics) on ``host:port``.

    With ``reporting``: the Alertmanager relay on the API, and outbox delivery plus the daily
    digest as a task beside the cycle.
    """
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    runner = None
    if port is not None:
        app = build_app(analyzer.store, read_secret(token_env), clock=analyzer.clock)

        async def metrics(_: web.Request) -> web.Response:
            return web.Response(body=generate_latest(analyzer.metrics.registry),
                                headers={"Content-Type": CONTENT_TYPE_LATEST})

        app.router.add_get("/metrics", metrics)
        if reporting is not None:
            reporting.mount(app)
        runner = await start_api(app, host, port)
        bound = runner.addresses[0][1]
        if port == 0 and reporting is not None:
            # No configuration could name the port the kernel picks: chat links use the one it got.
            reporting.settings.api_url = f"http://{host}:{bound}"
        port = bound
        if port_file is not None:
            write_port_file(port_file, port)
        logger.info("analyzer API on http://{}:{}", host, port)
    reporter_task = asyncio.create_task(reporting.run(stop)) if reporting is not None else None
    leadership = analyzer.leadership
    lease_task = asyncio.create_task(leadership.keep(stop)) if leadership is not None else None
    try:
        while not stop.is_set():
            try:
                await asyncio.to_thread(analyzer.cycle)
            except sqlite3.Error as exc:
                # The store may be briefly locked by another reader's checkpoint: skip one cycle.
                logger.error("analyzer: store error, cycle skipped: {}", exc)
            if leadership is not None:
                await leadership.pause(stop, analyzer.wait_s(interval_s))
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), analyzer.wait_s(interval_s))
    finally:
        if leadership is not None and lease_task is not None:
            stop.set()
            await lease_task
            await asyncio.to_thread(leadership.release)
        if reporter_task is not None:
            stop.set()
            await reporter_task
        if runner is not None:
            await runner.cleanup()
        logger.info("analyzer stopped")
