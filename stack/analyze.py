"""``oximeter analyze``: the analyzer daemon with the reporter beside its cycle, in one process.

The daemon knows the reporter only as a notifier and a companion task; this command wires the
two, so neither the analyzer nor the reporter imports the other.
"""

from __future__ import annotations

import argparse
import sys

from prometheus_client import CollectorRegistry

from analyzer.incidents.store import IncidentStore
from analyzer.service import analyze_cmd
from analyzer.service.daemon_metrics import LogNotifier, Notifier
from analyzer.service.limits import configured_catalogue
from analyzer.signals.slo import SloSettings
from oximeter.config import read_config, section
from oximeter.errors import OximeterError
from oximeter.secrets import read_secret
from reporter.settings import ReporterSettings
from reporter.wiring import Reporting, build_reporting


def configure(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``oximeter analyze``: the daemon's."""
    analyze_cmd.configure(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Entry point of ``oximeter analyze``."""
    try:
        sections, where = read_config(args.config)
        settings = section(sections, "reporter", ReporterSettings, where)
        catalogue = configured_catalogue(args.config)  # the digest chart's signals and their limits
        slos = section(sections, "slos", SloSettings, where)
    except OximeterError as exc:
        print(f"oximeter analyze: {exc}", file=sys.stderr)
        return 2

    def reporting(store: IncidentStore, registry: CollectorRegistry) -> tuple[Notifier, Reporting]:
        # The outbox lives in the daemon's store; chat channels read their URLs from the environment.
        built = build_reporting(store, settings, read_secret("OXIMETER_API_TOKEN"), registry, catalogue, slos)
        return (built.notifier if settings.channels else LogNotifier()), built

    return analyze_cmd.run(args, reporting)
