"""The whole local stack on 127.0.0.1 in one workspace, for the demo and the live tests.

Start order follows the dependencies, each step polled until ready: (backfill) → Redis →
simulator → one exporter and one gateway per node → Alertmanager → Prometheus (every target up)
→ add-ons (the analyzer daemon) → Alertmanager and Prometheus reloaded with the add-ons' webhook and
scrape targets → traffic. No port is chosen before it is bound (``stack/ports.py``): each step
learns its ports as it starts, and every configuration naming a port is written after that port is
known. ``stop()`` goes in reverse, and
``start()`` stops what it started when a step fails, so nothing outlives an error or Ctrl-C.
Missing binaries are reported before anything starts, pointing at ``make doctor``.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import secrets
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any

import requests

from alert_rules import rule_files
from alert_rules.scale import format_duration
from oximeter.errors import DependencyError, OximeterError
from oximeter.prometheus import PrometheusClient
from simulator.admin import TOKEN_ENV
from stack.backfill import BackfillResult, BackfillSpec, build_backfill
from stack.config import (
    ANALYZER_JOB,
    Webhook,
    alertmanager_config,
    prometheus_config,
    write_yaml,
)
from stack.options import Addon, Endpoints, Observer, QuietObserver, StackOptions
from stack.ports import start_reserved, wait_port, wait_ports
from stack.procs import ManagedProcess, http_ok, oximeter_argv
from stack.scrape_setup import hostport, rule_paths, scrape_targets, wait_ready
from stack.vllm.engine import VllmEngine, launch_fleet
from stack.vllm.warmup import warm_up

BINARIES = {"prometheus": "prometheus", "promtool": "prometheus", "alertmanager": "prometheus-alertmanager",
            "redis": "redis-server"}  # role -> Debian package
_EXECUTABLES = {"prometheus": "prometheus", "promtool": "promtool", "alertmanager": "prometheus-alertmanager",
                "redis": "redis-server"}


class StackError(OximeterError):
    """The stack cannot start (a missing binary, a component that never became ready)."""


def find_binaries(roles: list[str], search_path: str | None = None) -> dict[str, str]:
    """Paths of the binaries ``roles`` need (``$PATH``, then /usr/bin); one error names every missing one."""
    found, missing = {}, []
    for role in roles:
        name = _EXECUTABLES[role]
        path = shutil.which(name, path=search_path or f"{os.environ.get('PATH', '')}{os.pathsep}/usr/bin")
        if path is None:
            missing.append(f"{name} (Debian package {BINARIES[role]})")
        else:
            found[role] = path
    if missing:
        raise StackError(f"missing binaries: {', '.join(missing)}; run `make doctor` to see what is "
                         "installed and `make setup` to install them")
    return found


class Stack:
    """One local stack: ``with Stack(ws, options) as stack: ...`` starts it and always stops it."""

    def __init__(self, workspace: Path, options: StackOptions | None = None,
                 observer: Observer | None = None) -> None:
        self.workspace = Path(workspace).resolve()
        self.options = options or StackOptions()
        self.observer: Observer = observer or QuietObserver()
        self.processes: list[ManagedProcess] = []
        self.admin_token = secrets.token_urlsafe(24)
        self.nodes = [f"n{i}" for i in range(1, self.options.nodes + 1)]
        self.stock = self.options.telemetry == "stock"
        self.endpoints: Endpoints | None = None
        self.backfill: BackfillResult | None = None
        self.prometheus_started_s: float | None = None
        self.timings_s: dict[str, float] = {}
        self.vllm_engines: dict[str, VllmEngine] = {}  # by node, with ``options.vllm``

    # -- lifecycle --------------------------------------------------------------------------
    def __enter__(self) -> Stack:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def start(self) -> Endpoints:
        """Start everything in dependency order; on any failure (or Ctrl-C) stop what started."""
        opts = self.options
        roles = ["prometheus", "promtool"] + (["alertmanager"] if opts.alertmanager else []) + \
            (["redis"] if opts.redis else [])
        bins = find_binaries(roles)
        self.workspace.mkdir(parents=True, exist_ok=True)
        try:
            self._start(bins)
        except BaseException:
            self.stop()
            raise
        assert self.endpoints is not None
        return self.endpoints

    def stop(self) -> None:
        """Stop every process (signalled in reverse start order, then awaited together); safe to
        call more than once."""
        ManagedProcess.stop_all(list(reversed(self.processes)))
        self.processes.clear()

    # -- start steps ------------------------------------------------------------------------
    def _timed(self, name: str, detail: str, fn: Callable[[], Any]) -> Any:
        self.observer.step(name, detail)
        t0 = time.monotonic()
        value = fn()
        self.timings_s[name] = time.monotonic() - t0
        self.observer.done(name)
        return value

    def _launch(self, name: str, argv: list[str], ready: Callable[[], object] | None,
                env: Mapping[str, str] | None = None, timeout_s: float = 60.0) -> ManagedProcess:
        proc = ManagedProcess(name, argv, self.workspace / "logs", env=dict(env or {}),
                              cwd=self.workspace).start()
        self.processes.append(proc)
        if ready is not None:
            proc.wait_ready(ready, timeout_s)
        return proc

    def _start(self, bins: dict[str, str]) -> None:
        opts, ws = self.options, self.workspace
        prom_dir = ws / "prometheus"
        if prom_dir.exists():
            shutil.rmtree(prom_dir)  # a fresh TSDB every start: the backfill is the only past
        if opts.backfill is not None:
            spec = opts.backfill
            self.backfill = self._timed("backfill", f"{spec.days:g} day(s) of history, {spec.nodes} nodes",
                                        lambda: build_backfill(spec, opts.backfill_dir or ws / "backfill",
                                                               rule_files=rule_files(),
                                                               promtool=bins["promtool"],
                                                               prometheus=bins["prometheus"]))
            self.backfill.install(prom_dir / "data")
        redis = None
        if opts.redis:
            redis = self._timed("redis", "redis", lambda: self._start_redis(bins["redis"]))
        if opts.engine_urls is not None:
            engines = {node: opts.engine_urls[node] for node in self.nodes}
        elif opts.vllm is None:
            engines = self._timed("simulator", f"{opts.nodes} simulated engines", self._start_simulator)
        else:
            engine_spec = opts.vllm
            self._timed("vllm", f"{opts.nodes} vLLM engines (minutes on a CPU)", lambda: launch_fleet(
                self.nodes, engine_spec, ws / "logs", self.vllm_engines, self.processes))
            self._timed("warm-up", "the engines' first batches (their slowest)",
                        lambda: warm_up(self.vllm_engines, engine_spec))
            engines = {node: engine.url for node, engine in self.vllm_engines.items()}
        exporters, gateways = self._timed(
            "exporters+gateways", f"{opts.nodes} exporters and {opts.nodes} gateways",
            lambda: self._start_node_services(engines, redis))
        self.endpoints = Endpoints(
            simulator=engines[self.nodes[0]], engines=engines, exporters=exporters, gateways=gateways,
            prometheus="", alertmanager=None, redis=redis, addons={})
        if opts.alertmanager:
            am_url = self._timed("alertmanager", "alertmanager",
                                 lambda: self._start_alertmanager(bins["alertmanager"]))
            self.endpoints = dataclasses.replace(self.endpoints, alertmanager=am_url)
        prom_url = self._timed("prometheus", "prometheus",
                               lambda: self._start_prometheus(bins["prometheus"], prom_dir))
        self.endpoints = dataclasses.replace(self.endpoints, prometheus=prom_url)
        for addon in opts.addons:
            self._timed(addon.name, addon.name, lambda addon=addon: self._start_addon(addon))  # type: ignore[misc]
        if opts.addons:
            self._timed("reload", "alertmanager and prometheus told the add-ons' ports", self._reload)
        if opts.traffic_rps_per_node > 0:
            self._timed("traffic", f"traffic {opts.traffic_rps_per_node * opts.nodes:g} req/s",
                        self._start_traffic)

    def _port_file(self, name: str) -> Path:
        """Where child ``name`` writes the port it bound (none left from an earlier run)."""
        path = self.workspace / "ports" / f"{name}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.unlink(missing_ok=True)
        return path

    def _start_simulator(self) -> dict[str, str]:
        opts = self.options
        port_file = self._port_file("simulator")
        proc = self._launch("simulator", oximeter_argv(
            "sim", "serve", "--port", "0", "--port-file", str(port_file), "--nodes", str(opts.nodes),
            "--gpus-per-node", str(opts.gpus_per_node), "--seed", str(opts.seed), "--model", opts.model,
            "--dependency-latency-s", str(opts.dependency_latency_s), "--telemetry", opts.telemetry), None,
            env={TOKEN_ENV: self.admin_token})
        ports = wait_ports(proc, port_file)
        engines = {n: f"http://127.0.0.1:{ports[n]}" for n in self.nodes}
        proc.wait_ready(lambda: all(http_ok(f"{url}/health") for url in engines.values()), 60)
        return engines

    def _start_addon(self, addon: Addon) -> None:
        assert self.endpoints is not None
        port_file = self._port_file(addon.name)
        proc = self._launch(addon.name, addon.argv(self.endpoints, port_file), None, env=addon.env)
        url = self.endpoints.addons[addon.name] = f"http://127.0.0.1:{wait_port(proc, port_file)}"
        if addon.ready_path:
            proc.wait_ready(functools.partial(http_ok, f"{url}{addon.ready_path}"), 60)

    def _reload(self) -> None:
        """Alertmanager and Prometheus, started before the add-ons, now told where they listen."""
        ep = self.endpoints
        assert ep is not None
        urls = [ep.prometheus]
        if ep.alertmanager is not None:
            self._write_alertmanager_config()
            urls.append(ep.alertmanager)
        self._write_prometheus_config()
        for url in urls:
            reply = requests.post(f"{url}/-/reload", timeout=30)
            if not reply.ok:
                raise StackError(f"reloading {url} failed: {reply.status_code} {reply.text.strip()}")

    def _start_traffic(self) -> None:
        opts, ep = self.options, self.endpoints
        assert ep is not None
        now = datetime.now(UTC)
        # The live day starts at the wall-clock hour, as the backfilled history's did.
        self._launch("traffic", oximeter_argv(
            "traffic", *[a for url in (ep.engines if self.stock else ep.gateways).values()
                         for a in ("--target", url)],
            "--base-rps", str(opts.traffic_rps_per_node * opts.nodes), "--day-seconds", str(opts.day_seconds),
            "--start-hour", f"{now.hour + now.minute / 60:.3f}", "--stream-ratio", str(opts.stream_ratio),
            "--prompt-scale", str(opts.prompt_scale),
            "--daily-shape" if opts.daily_shape else "--no-daily-shape",
            "--duration", str(10 * 365 * 86400), "--seed", str(opts.seed)), None)

    def _start_node_services(self, engines: dict[str, str],
                             redis: str | None) -> tuple[dict[str, str], dict[str, str]]:
        """Every node's exporter and gateway, started together and then polled (they are independent)."""
        opts = self.options
        started: dict[tuple[str, str], tuple[ManagedProcess, Path]] = {}
        for node in self.nodes:
            queue = ["--redis-url", redis, "--queue", f"jobs=oximeter:jobs:{node}"] if redis else []
            # A real engine's CPU host has no GPU: its exporter reads the host alone (a stock fleet's
            # dcgm-exporter would have nothing to read there, and none runs).
            if not (opts.real_engines and self.stock):
                port_file = self._port_file(f"exporter-{node}")
                naming = ["--naming", "dcgm-exporter"] if self.stock else []
                backend = ["--backend", "none"] if opts.real_engines else \
                    ["--backend", "sim", "--sim-url", engines[self.nodes[0]]]
                started["exporter", node] = (self._launch(f"exporter-{node}", oximeter_argv(
                    "exporter", *backend, "--node", node, "--host", "127.0.0.1", "--port", "0",
                    "--port-file", str(port_file), *queue, *naming), None), port_file)
            if self.stock:
                continue  # no gateway in front of a stock fleet's engines
            port_file = self._port_file(f"gateway-{node}")
            started["gateway", node] = (self._launch(f"gateway-{node}", oximeter_argv(
                "gateway", "--upstream", engines[node], "--host", "127.0.0.1", "--port", "0",
                "--port-file", str(port_file),
                "--service", opts.service, "--node", node, "--max-concurrency", str(opts.max_concurrency),
                "--max-queue", str(opts.max_queue), "--max-queue-wait", str(opts.max_queue_wait_s)), None),
                port_file)
        urls = {key: f"http://127.0.0.1:{wait_port(proc, port_file)}"
                for key, (proc, port_file) in started.items()}
        for (kind, node), (proc, _) in started.items():
            path = "/metrics" if kind == "exporter" else "/health/ready"
            proc.wait_ready(functools.partial(http_ok, f"{urls[kind, node]}{path}"), timeout_s=60)
        return ({n: urls["exporter", n] for n in self.nodes if ("exporter", n) in urls},
                {n: urls["gateway", n] for n in self.nodes if ("gateway", n) in urls})

    def _start_redis(self, binary: str) -> str:
        data = self.workspace / "redis"
        data.mkdir(parents=True, exist_ok=True)

        def ping(port: int) -> bool:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
        _, port = start_reserved(lambda port: self._launch(
            "redis", [binary, "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no",
                      "--dir", str(data)], None), ping)
        return f"redis://127.0.0.1:{port}"

    def _write_alertmanager_config(self) -> Path:
        opts, ep = self.options, self.endpoints
        assert ep is not None
        hooks = [a for a in opts.addons if a.webhook_path and a.name in ep.addons]
        webhook = Webhook(f"{ep.addons[hooks[0].name]}{hooks[0].webhook_path}",
                          opts.relay_token_file) if hooks else None
        return write_yaml(self.workspace / "alertmanager.yml", alertmanager_config(
            group_wait_s=opts.alert_group_wait_s, group_interval_s=opts.alert_group_interval_s,
            repeat_interval_s=opts.alert_repeat_interval_s, webhook=webhook))

    def _start_alertmanager(self, binary: str) -> str:
        config = self._write_alertmanager_config()  # the webhook follows once the add-ons listen
        # An empty cluster address switches gossip off: nothing listens beyond the one loopback port.
        _, port = start_reserved(lambda port: self._launch("alertmanager", [
            binary, f"--config.file={config}", f"--storage.path={self.workspace / 'alertmanager'}",
            f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address="], None),
            lambda port: http_ok(f"http://127.0.0.1:{port}/-/ready"))
        return f"http://127.0.0.1:{port}"

    def _write_prometheus_config(self) -> Path:
        opts, ep = self.options, self.endpoints
        assert ep is not None
        return write_yaml(self.workspace / "prometheus.yml", prometheus_config(
            scrape_targets(self.nodes, ep, opts.addons, stock=self.stock, kube=not opts.real_engines),
            rule_paths(self.workspace, opts.time_scale, stock=self.stock),
            scrape_interval_s=opts.scrape_interval_s, eval_interval_s=opts.eval_interval_s,
            alertmanager=hostport(ep.alertmanager) if ep.alertmanager else None))

    def _start_prometheus(self, binary: str, prom_dir: Path) -> str:
        opts = self.options
        # The add-ons' targets follow once they listen. Until then their job is absent (ScrapeJobMissing
        # waits 5 minutes, scaled) rather than down (TargetDown waits 2): more room for a slow start.
        config = self._write_prometheus_config()

        def argv(port: int) -> list[str]:
            # The lifecycle API (loopback only) is how the add-ons' targets are loaded later.
            args = [binary, f"--config.file={config}", f"--storage.tsdb.path={prom_dir / 'data'}",
                    f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=30d",
                    "--web.enable-lifecycle"]
            if opts.lookback_delta_s is not None:
                args.append(f"--query.lookback-delta={format_duration(opts.lookback_delta_s)}")
            return args
        self.prometheus_started_s = time.time()
        _, port = start_reserved(lambda port: self._launch("prometheus", argv(port), None),
                                 lambda port: http_ok(f"http://127.0.0.1:{port}/-/ready"))
        url = f"http://127.0.0.1:{port}"
        assert self.endpoints is not None
        wait_ready(url, self.endpoints, opts.eval_interval_s, stock=self.stock, kube=not opts.real_engines)
        return url

    # -- helpers for the demo and tests -----------------------------------------------------
    def query(self, promql: str, at_s: float | None = None) -> list[dict[str, Any]]:
        """An instant query's result vector (raises StackError on a query error)."""
        assert self.endpoints is not None
        params: dict[str, str] = {"query": promql}
        if at_s is not None:
            params["time"] = f"{at_s:.3f}"
        try:
            data = PrometheusClient(self.endpoints.prometheus, retries=0).post("/api/v1/query", params)
        except DependencyError as exc:
            raise StackError(f"query failed: {exc}: {promql}") from None
        result: list[dict[str, Any]] = data["result"]
        return result

    def alerts(self) -> list[dict[str, Any]]:
        """Prometheus's pending and firing alerts right now."""
        assert self.endpoints is not None
        alerts: list[dict[str, Any]] = requests.get(f"{self.endpoints.prometheus}/api/v1/alerts",
                                                    timeout=10).json()["data"]["alerts"]
        return alerts

    def fault(self, kind: str, node: str, *, gpu: int | None = None, strength: float | None = None,
              duration_s: float | None = None) -> str:
        """Inject a fault with ``oximeter sim fault`` (token in its environment); returns its id."""
        fault_id = f"{kind}-{secrets.token_hex(3)}"
        args = ["sim", "fault", kind, "--url", self._sim_url(), "--node", node, "--id", fault_id]
        for flag, value in (("--gpu", gpu), ("--strength", strength), ("--duration", duration_s)):
            if value is not None:
                args += [flag, str(value)]
        self._sim_fault(args)
        return fault_id

    def delete_fault(self, fault_id: str) -> None:
        """Remove an injected fault."""
        self._sim_fault(["sim", "fault", "--url", self._sim_url(), "--delete", fault_id])

    def _sim_url(self) -> str:
        assert self.endpoints is not None
        return self.endpoints.simulator

    def _sim_fault(self, args: list[str]) -> None:
        result = subprocess.run(oximeter_argv(*args), capture_output=True, text=True, timeout=60,
                                env={**os.environ, TOKEN_ENV: self.admin_token}, check=False)
        if result.returncode != 0:
            raise StackError(f"oximeter {' '.join(args[:3])} failed: {result.stdout}{result.stderr}")


__all__ = ["ANALYZER_JOB", "Addon", "BackfillSpec", "Endpoints", "Observer", "Stack", "StackError",
           "StackOptions", "find_binaries"]
