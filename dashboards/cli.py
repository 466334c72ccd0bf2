"""``oximeter dashboards build [--out DIR]``: grafanalib sources -> Grafana JSON."""

from __future__ import annotations

import argparse
from pathlib import Path

from dashboards.build import BUILD_DIR, write_all


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the ``build`` sub-command."""
    subparsers = parser.add_subparsers(dest="dashboards_command", metavar="SUBCOMMAND")
    build = subparsers.add_parser("build", help="write one JSON file per dashboard source")
    build.add_argument("--out", type=Path, default=BUILD_DIR,
                       help=f"output directory (default: {BUILD_DIR})")
    build.set_defaults(func=_build)


def _build(args: argparse.Namespace) -> int:
    for path in write_all(args.out):
        print(path)
    return 0
