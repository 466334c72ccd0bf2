"""Logging for every command: ``--log-level`` and ``--log-format text|json`` (one JSON object a line).

``oximeter.cli.main`` configures loguru for every command before running it; a command whose
``configure()`` sets ``configures_logging=True`` does it itself: the gateway (a sink cheap enough
for the request path, gateway/logsink.py) and the exporter (the standard library's logging, as
it runs on GPU hosts without loguru). Only the standard library is imported here at import time.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from loguru import Record

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
FORMATS = ("text", "json")
_TEXT_FORMAT = ("{time:YYYY-MM-DD HH:mm:ss.SSS!UTC} {level: <8} {extra[component]}: {message}"
                "{extra[fields]}\n{exception}")


def add_logging_arguments(parser: argparse.ArgumentParser) -> None:
    """``--log-level`` and ``--log-format``, the same on every command."""
    parser.add_argument("--log-level", default="INFO", type=str.upper, choices=LEVELS,
                        help="least severe level logged (default: INFO)")
    parser.add_argument("--log-format", default="text", choices=FORMATS,
                        help="text lines, or json: one JSON object per line (default: text)")


def _text_fields(record: Record) -> str:
    # Fields go in through extra, not the template: a brace in a value must not be formatted.
    extra = record["extra"]
    extra["fields"] = "".join(f" {k}={v}" for k, v in extra.items() if k not in ("component", "fields"))
    return _TEXT_FORMAT


def setup_logging(level: str = "INFO", *, json: bool = False, component: str = "oximeter") -> None:
    """Send loguru's records to stderr: text lines, or one JSON object per line when ``json``.

    ``enqueue=True`` moves formatting and writing off the event loop's thread, so a slow terminal
    or pipe never stalls a server's loop.
    """
    from loguru import logger

    logger.remove()
    logger.configure(extra={"component": component})
    logger.add(sys.stderr, level=level.upper(), serialize=json, enqueue=True, backtrace=False,
               diagnose=False, format="{message}" if json else _text_fields)


class JsonLineFormatter(logging.Formatter):
    """The standard library's records as one JSON object per line (time, level, component, message)."""

    def __init__(self, component: str) -> None:
        super().__init__()
        self.component = component

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname, "component": self.component, "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


def setup_stdlib_logging(level: str = "INFO", *, json: bool = False, component: str = "oximeter") -> None:
    """The same two formats for code that logs through the standard library (the exporter)."""
    handler = logging.StreamHandler(sys.stderr)
    formatter = JsonLineFormatter(component) if json else logging.Formatter(
        f"%(asctime)s.%(msecs)03d %(levelname)-8s {component}: %(message)s", datefmt="%Y-%m-%d %H:%M:%S")
    formatter.converter = time.gmtime  # UTC, as the loguru and gateway text lines
    handler.setFormatter(formatter)
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)
