"""``oximeter config check FILE``: validate a configuration file and name every problem."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from oximeter.config import load_config
from oximeter.errors import ConfigError, SecretMissingError
from oximeter.secrets import read_secret


def configure(parser: argparse.ArgumentParser) -> None:
    """Add ``config check``."""
    sub = parser.add_subparsers(dest="config_command", metavar="SUBCOMMAND")
    check = sub.add_parser("check", help="validate FILE; print every error with its file and key")
    check.add_argument("file", help="the YAML configuration file")
    check.set_defaults(func=check_command)


def check_command(args: argparse.Namespace) -> int:
    """Print ``FILE: ok`` or one line per problem; exit 1 on any problem. A valid file on stock
    inputs is followed by one line per input its exporters lack and the signals that disables,
    and one per availability objective that vLLM's counters cannot feed.

    The secrets the file names (chat webhook URLs and signing secrets) must be set in this
    environment too: a file that validates but cannot start its channels is not ok.
    """
    from reporter.channels import build_channels

    try:
        config = load_config(args.file)
        problems = config.slos.threshold_problems(config.analyzer.inputs) + secret_problems(config)
        try:
            build_channels(config.reporter.channels)
        except ConfigError as exc:
            problems = exc.problems + problems
        if problems:
            raise ConfigError(problems, args.file)
    except ConfigError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    print(f"{args.file}: ok")
    # Valid, but on stock inputs some signals may have nothing to read: named, not an error.
    for line in [*config.analyzer.missing_inputs(), *config.slos.unread_on(config.analyzer.inputs)]:
        print(f"{args.file}: {line}")
    return 0


def secret_problems(config: Any) -> list[str]:
    """Every secret the file names that this environment lacks or cannot read: the Prometheus
    tokens of the analyzer and the digest, and the Redis password of an exporter that reads
    queues (``redis_password_env: ""`` for a Redis without one)."""
    digest = config.reporter.digest
    named = [("analyzer.prometheus.bearer_token_env", config.analyzer.prometheus.bearer_token_env),
             ("reporter.digest.prometheus_bearer_token_env", digest.prometheus_bearer_token_env)]
    if config.exporter.redis_url:
        named.append(("exporter.redis_password_env", config.exporter.redis_password_env))
    problems = []
    for key, env_name in named:
        if env_name:
            try:
                read_secret(env_name, required=True)
            except SecretMissingError as exc:
                problems += [f"{key}: {p}" for p in exc.problems]
    return problems
