"""``oximeter config check FILE``: validate a configuration file and name every problem."""

from __future__ import annotations

import argparse
import sys

from oximeter.config import load_config
from oximeter.errors import ConfigError


def configure(parser: argparse.ArgumentParser) -> None:
    """Add ``config check``."""
    sub = parser.add_subparsers(dest="config_command", metavar="SUBCOMMAND")
    check = sub.add_parser("check", help="validate FILE; print every error with its file and key")
    check.add_argument("file", help="the YAML configuration file")
    check.set_defaults(func=check_command)


def check_command(args: argparse.Namespace) -> int:
    """Print ``FILE: ok`` or one line per problem; exit 1 on any problem. A valid file on stock
    inputs is followed by one line per input its exporters lack and the signals that disables.

    The secrets the file names (chat webhook URLs and signing secrets) must be set in this
    environment too: a file that validates but cannot start its channels is not ok.
    """
    from reporter.channels import build_channels

    try:
        config = load_config(args.file)
        try:
            build_channels(config.reporter.channels)
        except ConfigError as exc:
            raise ConfigError(exc.problems, args.file) from None
    except ConfigError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    print(f"{args.file}: ok")
    # Valid, but on stock inputs some signals may have nothing to read: named, not an error.
    for line in config.analyzer.missing_inputs():
        print(f"{args.file}: {line}")
    return 0
