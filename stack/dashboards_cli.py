"""``oximeter dashboards build [--out DIR]``: grafanalib sources -> Grafana JSON, with the limits of
the analyzer's signal catalogue and the configuration's overrides (``analyzer.signals``).

Wiring, above both: the dashboards package draws panels and knows no analyzer; this command hands
it the catalogue's limits.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from analyzer.service.limits import configured_limits
from dashboards.build import BUILD_DIR, write_all
from oximeter.errors import ConfigError


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the ``build`` sub-command."""
    subparsers = parser.add_subparsers(dest="dashboards_command", metavar="SUBCOMMAND")
    build = subparsers.add_parser("build", help="write one JSON file per dashboard source, its thresholds "
                                  "from the signal catalogue and the configuration's overrides")
    build.add_argument("--out", type=Path, default=BUILD_DIR,
                       help=f"output directory (default: {BUILD_DIR})")
    build.set_defaults(func=_build)


def _build(args: argparse.Namespace) -> int:
    try:
        known = configured_limits(args.config)
    except ConfigError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    for path in write_all(known, args.out):
        print(path)
    return 0
