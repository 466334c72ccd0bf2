"""``oximeter analyze``'s command: its arguments, the configuration it reads, the source it
judges (Prometheus, a replayed history or a signal file) and the daemon it wires from them
(``analyzer/service/daemon.py``), with the lease when analyzers share a store."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import importlib
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, get_args

from loguru import logger

from analyzer.diagnosis.burn import burn_specs
from analyzer.diagnosis.topology import Topology, TopologySettings
from analyzer.incidents.lifecycle import IncidentSettings
from analyzer.incidents.store import IncidentStore
from analyzer.service.daemon import Analyzer, Companion, serve
from analyzer.service.daemon_metrics import DaemonMetrics, LogNotifier, Notifier
from analyzer.service.kube_changes import ENGINE_RESTARTS, FEEDS, KubeChangePoller
from analyzer.service.leadership import Gate, Leadership
from analyzer.service.pipeline import CONTEXT, CyclePipeline
from analyzer.service.settings import AnalyzerSettings, InputProfile
from analyzer.signals.slo import SloSettings
from analyzer.signals.sources.base import ReplayClock, Source
from oximeter.config import DEFAULT_CONFIG_PATH, read_config, section
from oximeter.errors import ConfigError, OximeterError
from oximeter.inputs import cli_type, parse_timestamp
from oximeter.lease import Lease
from oximeter.store import connect
from oximeter.store_lock import hold_store

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

# Given the store (the outbox lives in it) and the daemon's metrics registry: the notifier the
# cycle hands changes to, and the companion to run beside it (None: nothing). An OximeterError
# says why it cannot be built (a channel's secret missing).
CompanionFactory = Callable[[IncidentStore, "CollectorRegistry"], tuple[Notifier, Companion | None]]


def configure(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``oximeter analyze``."""
    parser.add_argument("--once", action="store_true",
                        help="run one cycle and exit (no API); a replay's cycle is at its start")
    parser.add_argument("--replay", metavar="DIR",
                        help="replay `oximeter sim history` output instead of Prometheus")
    parser.add_argument("--signals", metavar="FILE", help="replay a long signal file (CSV/Parquet)")
    parser.add_argument("--speed", type=float, default=60.0, help="replay speed (default 60 ×)")
    parser.add_argument("--replay-start", metavar="ISO", type=cli_type(parse_timestamp, "--replay-start"),
                        help="replayed time to start at (default: the data's start)")
    parser.add_argument("--store", default=None, help="store file (default: incidents.store_path)")
    parser.add_argument("--inputs", choices=get_args(InputProfile), default=None,
                        help="whose telemetry to read (default: analyzer.inputs): Oximeter's exporter and "
                        "gateway, stock dcgm-exporter/vLLM/kube-state-metrics, or both")
    parser.add_argument("--port", type=int, default=None, help="API port (default: incidents.api_port)")
    parser.add_argument("--port-file", metavar="PATH",
                        help="write the API port there once listening (with --port 0 the kernel picks it, "
                        "and chat links point at it)")
    parser.set_defaults(func=run)


def replay_source(directory: str, *, speed: float = 60.0, start: datetime | None = None,
                  selector: str = "", stock: bool = False) -> Source:
    """``oximeter sim history`` output as a source, context series included (``selector``: only
    the series a shard's label matchers select; ``stock``: the history holds stock exporters'
    series, read with what the adapter rules would record from them, as Prometheus would hold)."""
    from analyzer.signals.sources.frames import FrameSource
    from analyzer.signals.sources.stock import read_history

    # Translated over the whole fleet before a shard selects, as Prometheus evaluates the adapter
    # rules: a record may take its node from another series (a pod's, through kube_pod_info).
    raw = read_history(directory, stock=stock).only(selector)
    clock = ReplayClock(start or raw.index[0].to_pydatetime(), speed).now
    return FrameSource(raw=raw, clock=clock)


@dataclass(frozen=True)
class AnalyzeConfig:
    """The sections the analyzer runs on (the rest of the file is not its business)."""

    analyzer: AnalyzerSettings
    incidents: IncidentSettings
    topology: TopologySettings
    slos: SloSettings = dataclasses.field(default_factory=SloSettings)

    @classmethod
    def load(cls, path: str | None) -> AnalyzeConfig:
        """Read ``path`` (or ./oximeter.yaml) and validate the four sections."""
        sections, where = read_config(path)
        return cls(section(sections, "analyzer", AnalyzerSettings, where),
                   section(sections, "incidents", IncidentSettings, where),
                   section(sections, "topology", TopologySettings, where),
                   section(sections, "slos", SloSettings, where))


def _source(args: argparse.Namespace, config: AnalyzeConfig) -> Source:
    from analyzer.signals.sources.frames import FrameSource

    start: datetime | None = args.replay_start
    # One cycle judges the replay at its start: at the running speed the instant would depend on
    # how long the set-up took (60 × a slow machine's 20 s of imports is 20 minutes later).
    speed = 0.0 if args.once else args.speed
    if args.replay:
        return replay_source(args.replay, speed=speed, start=start, selector=config.analyzer.ha.selector,
                             stock=config.analyzer.inputs != "oximeter")
    if args.signals:
        return FrameSource.from_signal_file(args.signals, speed=speed, start=start,
                                            selector=config.analyzer.ha.selector)
    try:
        prometheus = importlib.import_module("analyzer.signals.sources.prometheus")
    except ImportError:
        raise OximeterError("the Prometheus source is not available yet: use --replay or --signals") from None
    source: Source = prometheus.PrometheusSource.from_settings(config.analyzer.prometheus,
                                                               config.analyzer.ha.selector)
    return source


def run(args: argparse.Namespace, companion: CompanionFactory | None = None) -> int:
    """The analyzer daemon on ``args`` (``oximeter analyze``'s), with ``companion`` beside its cycle."""
    try:
        config = AnalyzeConfig.load(args.config)
        if getattr(args, "inputs", None):
            inputs = config.analyzer.model_copy(update={"inputs": args.inputs})
            config = dataclasses.replace(config, analyzer=inputs)
        settings = config.incidents
        # Said before anything else can fail: the signals these inputs cannot feed are left out.
        for line in config.analyzer.missing_inputs():
            logger.warning("{}", line)
        store_path = args.store or settings.store_path
        # Analyzers with a lease share the store; without one, a second is refused.
        alone = not config.analyzer.ha.enabled and str(store_path) != ":memory:"
        lock = hold_store(store_path, "oximeter analyze") if alone else None
        try:
            store = IncidentStore(connect(store_path), config.analyzer.ha.shard)
        except OximeterError:
            if lock is not None:
                lock.release()
            raise
    except OximeterError as exc:
        print(f"oximeter analyze: {exc}", file=sys.stderr)
        return 2
    try:
        return _run(args, config, store, companion)
    finally:
        store.conn.close()
        if lock is not None:
            lock.release()


def _run(args: argparse.Namespace, config: AnalyzeConfig, store: IncidentStore,
         companion: CompanionFactory | None) -> int:
    settings = config.incidents
    try:
        source = _source(args, config)
    except OximeterError as exc:
        print(f"oximeter analyze: {exc}", file=sys.stderr)
        return 2
    pipeline = CyclePipeline(source, config.analyzer.catalogue(), config.analyzer.step_s,
                             config.analyzer.live_window_s, policy=config.analyzer.baseline.policy(),
                             change_events=store.change_events,
                             context_specs={**CONTEXT, **burn_specs(config.slos)})
    metrics = DaemonMetrics()
    notifier: Notifier = LogNotifier()
    reporting = None
    try:
        if companion is not None:
            notifier, reporting = companion(store, metrics.registry)
    except OximeterError as exc:
        if isinstance(exc, ConfigError) and exc.path is None:  # a channel's secret: name the file too
            exc = ConfigError(exc.problems, str(args.config or DEFAULT_CONFIG_PATH))
        print(f"oximeter analyze: {exc}", file=sys.stderr)
        return 2
    leadership = None
    if config.analyzer.ha.enabled and not args.once:
        ha = config.analyzer.ha
        notifier = gate = Gate(notifier)
        leadership = Leadership(Lease(store.conn, ha.shard, ha.lease_s), gate, ha.renew_s)
    # Restarts and rollouts from the telemetry (replays hold none): each engine's own start time,
    # and on stock telemetry kube-state-metrics' too.
    feeds = (*FEEDS, ENGINE_RESTARTS) if config.analyzer.inputs != "oximeter" else (ENGINE_RESTARTS,)
    kube = (KubeChangePoller(source, store, config.analyzer.step_s, feeds)
            if not (args.replay or args.signals) else None)
    analyzer = Analyzer(pipeline, store, settings, Topology.from_settings(config.topology), notifier,
                        clock=source.now, metrics=metrics, catalogue=pipeline.catalogue,
                        change_feed=kube.poll if kube is not None else None,
                        unreadable=config.analyzer.unreadable_context(),
                        not_judged=config.analyzer.not_judged(),
                        maintenance=[m.window() for m in settings.maintenance], slos=config.slos,
                        leadership=leadership)
    # A restart into an ongoing fault: its evidence stays out of the first cycle's baselines.
    pipeline.remember(e for inc in analyzer.tracker.incidents if inc.state == "open" for e in inc.evidence)
    if args.once:
        return 0 if analyzer.cycle() else 1
    port = settings.api_port if args.port is None else args.port
    # The caller closes the store once serve() has returned: no cycle thread or API handler uses it then.
    asyncio.run(serve(analyzer, config.analyzer.interval_s, settings.api_host, port,
                      reporting=reporting, port_file=args.port_file))
    return 0
