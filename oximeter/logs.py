"""Structured JSON logging with loguru, configured once per process in ``main()``."""

from __future__ import annotations

import sys

from loguru import logger


def setup_logging(level: str = "INFO", *, json: bool = True, component: str = "oximeter") -> None:
    """Send logs to stderr, as one JSON object per line when ``json`` is set.

    ``enqueue=True`` moves formatting and writing off the event loop's thread, so a slow
    terminal or pipe never stalls request handling (seed 000 §3.1 logs sit on the hot path).
    """
    logger.remove()
    logger.configure(extra={"component": component})
    logger.add(sys.stderr, level=level.upper(), serialize=json, enqueue=True, backtrace=False, diagnose=False)
