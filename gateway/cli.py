"""``oximeter gateway``: flags override the ``gateway:`` section of the configuration file."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import signal
import sys
from typing import Any

from aiohttp import web
from loguru import logger

from gateway.app import Gateway
from gateway.logsink import RequestLog, setup_gateway_logging
from gateway.settings import GatewaySettings
from oximeter.config import read_config
from oximeter.errors import ConfigError
from oximeter.guard import GuardedSite
from oximeter.plain_settings import SettingError, from_mapping
from oximeter.ports import write_port_file

# flag -> settings field; None defaults mean "keep the configured value".
_FLAGS: tuple[tuple[str, str, type, str], ...] = (
    ("--upstream", "upstream", str, "engine base URL (default http://127.0.0.1:8100)"),
    ("--host", "host", str, "address to bind (default 127.0.0.1)"),
    ("--port", "port", int, "port to listen on (default 8000)"),
    ("--service", "service", str, "value of the service label"),
    ("--node", "node", str, "value of the node label"),
    ("--max-concurrency", "max_concurrency", int, "most requests upstream at once"),
    ("--max-queue", "max_queue", int, "bound of the waiting queue; beyond it 429"),
    ("--max-queue-wait", "max_queue_wait_s", float, "seconds; a longer predicted wait gets 429 at once"),
    ("--first-byte-timeout", "first_byte_timeout_s", float, "seconds to the first byte; then 504 and abort"),
    (
        "--stream-idle-timeout",
        "stream_idle_timeout_s",
        float,
        "seconds between chunks; then error event and abort",
    ),
    ("--max-body-bytes", "max_body_bytes", int, "larger request bodies get 413"),
    ("--header-timeout", "header_timeout_s", float, "seconds for a request's line and headers; then closed"),
    ("--body-timeout", "body_timeout_s", float, "seconds for a request's body; then 408"),
    ("--idle-timeout", "idle_timeout_s", float, "seconds a kept-alive connection may idle; then closed"),
    ("--max-connections-per-client", "max_connections_per_client", int, "beyond it 429 and close"),
    ("--max-tokens-limit", "max_tokens_limit", int, "larger max_tokens get 400"),
    ("--max-prompt-chars", "max_prompt_chars", int, "longer prompts get 400"),
)


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the gateway's flags."""
    for flag, field, kind, help_text in _FLAGS:
        metavar = {float: "SECONDS", int: "N"}.get(kind, flag.lstrip("-").upper())
        parser.add_argument(flag, dest=field, type=kind, default=None, metavar=metavar, help=help_text)
    parser.add_argument(
        "--model",
        dest="models",
        action="append",
        default=None,
        help="allowed model label value (repeatable; default: the upstream's /v1/models)",
    )
    parser.add_argument(
        "--port-file",
        default=None,
        metavar="PATH",
        help="write the port listened on there once listening (with --port 0 the kernel picks it)",
    )
    parser.add_argument(
        "--no-warmup",
        dest="warmup",
        action="store_false",
        default=None,
        help="report ready without a warm-up request",
    )
    # Its own sink: four lines a request must not cost the event loop (gateway/logsink.py).
    parser.set_defaults(func=run, configures_logging=True)


def resolve_settings(args: argparse.Namespace) -> GatewaySettings:
    """The ``gateway:`` section with the given flags applied, validated together."""
    sections, where = read_config(args.config)
    try:
        base = from_mapping(GatewaySettings, sections.get("gateway"))
    except SettingError as exc:
        raise ConfigError([f"gateway.{exc}"], where) from None
    fields = [field for _flag, field, _kind, _help in _FLAGS] + ["models", "warmup"]
    overrides: dict[str, Any] = {f: getattr(args, f) for f in fields if getattr(args, f, None) is not None}
    if "models" in overrides:
        overrides["models"] = tuple(overrides["models"])
    try:
        return dataclasses.replace(base, **overrides)
    except SettingError as exc:
        flag = exc.key.removesuffix("[]").replace("_", "-")
        raise ConfigError([f"--{flag}: {exc.problem}"], "<command line>") from None


async def serve(
    settings: GatewaySettings, request_log: RequestLog | None = None, port_file: str | None = None
) -> None:
    """Serve until SIGTERM or SIGINT, then close the listener and the upstream pool."""
    gateway = Gateway(settings, request_log)
    # handler_cancellation: a client that disconnects cancels its handler, which is how a queued
    # request leaves the queue and a streaming one aborts its upstream.
    runner = web.AppRunner(gateway.build_app(), handler_cancellation=True, access_log=None,
                           keepalive_timeout=settings.idle_timeout_s)
    await runner.setup()
    site = GuardedSite(runner, settings.host, settings.port, gateway.guard, backlog=1024)
    await site.start()
    port = runner.addresses[0][1]
    if port_file is not None:
        write_port_file(port_file, port)
    logger.info(
        "gateway listening",
        host=settings.host,
        port=port,
        upstream=settings.upstream,
        service=settings.service,
        node=settings.node,
        max_concurrency=settings.max_concurrency,
        max_queue=settings.max_queue,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()
        logger.info("gateway stopped")


def _new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def run(args: argparse.Namespace) -> int:
    """Entry point of ``oximeter gateway``."""
    try:
        settings = resolve_settings(args)
    except ConfigError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    sink, request_log = setup_gateway_logging(args.log_level, json_lines=args.log_format == "json")
    try:
        with asyncio.Runner(loop_factory=_new_loop) as runner:
            runner.run(serve(settings, request_log, args.port_file))
    finally:
        sink.stop()
    return 0
