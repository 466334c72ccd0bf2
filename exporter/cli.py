"""``oximeter exporter`` (and ``python -m exporter`` on a minimal GPU host).

Settings come from the ``exporter:`` section of the YAML config, then CLI flags override them.
Binds 127.0.0.1 unless told otherwise.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import logging
import signal
import socket
import sys
import threading
from collections.abc import Sequence
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server

from exporter.backends import BACKENDS
from exporter.backends.base import BackendClass, BackendStartError, GpuBackend
from exporter.collector import GpuCollector
from exporter.host import ProcessMemory
from exporter.queues import RedisQueues, read_password
from exporter.settings import NAMINGS, ExporterSettings, QueueSpec
from oximeter.config import read_config
from oximeter.errors import ConfigError
from oximeter.logs import add_logging_arguments, setup_stdlib_logging
from oximeter.ports import write_port_file

log = logging.getLogger("exporter")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The exporter's flags; each overrides the config file only when given."""
    parser.add_argument("--backend", choices=sorted(BACKENDS),
                        help="nvml (real GPUs), sim, or none (a CPU host: its processes, memory and queues, "
                        "no GPU series) (default: nvml)")
    parser.add_argument("--sim-url", help="simulator base URL (default: http://127.0.0.1:8100)")
    parser.add_argument("--node", help="node label (default: this host's name)")
    parser.add_argument("--host", help="address to listen on (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, help="port to listen on (default: 9400)")
    parser.add_argument("--port-file", metavar="PATH",
                        help="write the port there once listening (with --port 0 the kernel picks it)")
    parser.add_argument("--naming", choices=NAMINGS,
                        help="dcgm: also export dcgm-exporter names; dcgm-exporter: only those of its "
                        "default counters, as dcgm-exporter itself would (no Oximeter series)")
    parser.add_argument("--process", action="append", metavar="NAME",
                        help="inference process to report RSS for (repeatable; default: vllm)")
    parser.add_argument("--redis-url", help="Redis for external queues (password: $OXIMETER_REDIS_PASSWORD)")
    parser.add_argument("--queue", action="append", metavar="NAME=KEY", help="a Redis list (repeatable)")
    parser.add_argument("--stream", action="append", metavar="NAME=KEY", help="a Redis stream (repeatable)")


def configure(parser: argparse.ArgumentParser) -> None:
    """Sub-command hook for ``oximeter exporter``."""
    add_arguments(parser)
    # The standard library's logging: the exporter runs on GPU hosts without loguru.
    parser.set_defaults(func=run, configures_logging=True)


def load_settings(config: str | None, args: argparse.Namespace) -> ExporterSettings:
    """The ``exporter:`` section of ``config`` (or ./oximeter.yaml), overridden by ``args``."""
    sections, where = read_config(config)
    try:
        settings = ExporterSettings.from_mapping(sections.get("exporter"))
    except (TypeError, ValueError) as exc:
        raise ConfigError([f"exporter.{exc}"], where) from None
    overrides: dict[str, Any] = {}
    for key in ("backend", "sim_url", "node", "host", "port", "naming", "redis_url"):
        value = getattr(args, key, None)
        if value is not None:
            overrides[key] = value
    if getattr(args, "process", None):
        overrides["process_names"] = tuple(args.process)
    queues = [*_queue_specs(getattr(args, "queue", None), "list"),
              *_queue_specs(getattr(args, "stream", None), "stream")]
    if queues:
        overrides["queues"] = tuple(queues)
    try:
        return dataclasses.replace(settings, **overrides)
    except ValueError as exc:
        raise ConfigError([f"command line: {exc}"], None) from None


def _queue_specs(values: Sequence[str] | None, kind: str) -> list[QueueSpec]:
    specs = []
    for value in values or ():
        name, sep, key = value.partition("=")
        if not sep:
            raise ConfigError([f"--{'stream' if kind == 'stream' else 'queue'} {value!r}: expected NAME=KEY"])
        specs.append(QueueSpec(name=name, key=key, kind=kind))
    return specs


def make_backend(settings: ExporterSettings, node: str) -> GpuBackend:
    """The configured backend, from the registry in ``exporter/backends/__init__.py``."""
    module_name, _, class_name = BACKENDS[settings.backend].partition(":")
    cls: BackendClass = getattr(importlib.import_module(module_name), class_name)
    return cls.from_settings(settings, node)


def run(args: argparse.Namespace) -> int:
    """Serve /metrics until SIGTERM or SIGINT."""
    setup_stdlib_logging(args.log_level, json=args.log_format == "json", component="exporter")
    try:
        settings = load_settings(getattr(args, "config", None), args)
        password = read_password(settings.redis_password_env) if settings.queues else None
    except ConfigError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    node = settings.node or socket.gethostname()
    backend = make_backend(settings, node)
    try:
        backend.start()
    except BackendStartError as exc:
        print(f"oximeter exporter: {exc}", file=sys.stderr)
        return 1
    queues = None
    if settings.queues:
        queues = RedisQueues(settings.redis_url, settings.queues, timeout_s=settings.redis_timeout_s,
                             password=password)
    collector = GpuCollector(backend, node, host=ProcessMemory(settings.process_names), queues=queues,
                             naming=settings.naming)
    registry = CollectorRegistry()
    registry.register(collector)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        server, _thread = start_http_server(settings.port, addr=settings.host, registry=registry)
    except OSError as exc:
        print(f"oximeter exporter: cannot listen on {settings.host}:{settings.port}: {exc.strerror}",
              file=sys.stderr)
        backend.close()
        return 1
    port = int(server.server_address[1])
    if getattr(args, "port_file", None):
        write_port_file(args.port_file, port)
    log.info("exporter (%s backend, node %s) on http://%s:%d/metrics",
             backend.name, node, settings.host, port)
    try:
        stop.wait()
    finally:
        server.shutdown()
        server.server_close()
        backend.close()
        if queues is not None:
            queues.close()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m exporter``: the same command without the ``oximeter`` CLI around it."""
    parser = argparse.ArgumentParser(prog="python -m exporter",
                                     description="export GPU (NVML or simulated) and external queue metrics")
    parser.add_argument("--config", default=None, help="YAML configuration file (default: ./oximeter.yaml)")
    add_logging_arguments(parser)
    add_arguments(parser)
    return run(parser.parse_args(argv))
