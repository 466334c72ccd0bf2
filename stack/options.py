"""What the local stack runs (``StackOptions``), where it listens (``Endpoints``) and its hooks.

Add-ons (the analyzer daemon, a chat sink) and the progress observer are the extension
points; ``stack/local.py`` does the starting and stopping.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from gateway.settings import GatewaySettings
from simulator.defaults import DEPENDENCY_LATENCY_S, FLEET_GATEWAY, MODEL, NODES, SERVICE, STACK_GPUS_PER_NODE
from stack.backfill import BackfillSpec
from stack.vllm.engine import EngineSpec

_GATEWAY = GatewaySettings()


@dataclass(frozen=True)
class Addon:
    """A process started after Prometheus (the analyzer daemon), on a port of its own.

    ``argv`` gets the stack's endpoints and a path: the add-on binds port 0 and writes the port it got
    there (``oximeter.ports.write_port_file``). With ``scrape_job`` Prometheus scrapes
    its ``/metrics``; with ``webhook_path`` Alertmanager notifies it (``relay_token_file`` as bearer).
    """

    name: str
    argv: Callable[[Endpoints, Path], list[str]]
    ready_path: str | None = "/metrics"
    scrape_job: str | None = None
    webhook_path: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class StackOptions:
    """What to run and how fast time goes; defaults are the demo's, tests shorten the intervals."""

    nodes: int = NODES
    gpus_per_node: int = STACK_GPUS_PER_NODE
    seed: int = 0
    model: str = MODEL
    service: str = SERVICE
    dependency_latency_s: float = DEPENDENCY_LATENCY_S
    time_scale: float = 1.0  # rule durations divided by this (alert_rules/scale.py)
    scrape_interval_s: float = 15.0
    eval_interval_s: float = 15.0
    lookback_delta_s: float | None = None  # Prometheus's default (5m) when None
    backfill: BackfillSpec | None = None
    backfill_dir: Path | None = None  # reuse a finished backfill there (default: the workspace)
    alertmanager: bool = True
    alert_group_wait_s: float = 30.0
    alert_group_interval_s: float = 300.0
    alert_repeat_interval_s: float = 4 * 3600.0
    relay_token_file: Path | None = None
    redis: bool = True
    # The history's base_rps, so baselines compare like with like; 0: no traffic generator (the
    # caller makes the load).
    traffic_rps_per_node: float = 1.0
    stream_ratio: float = 1.0  # history models streaming requests: TTFT is the first chunk
    # Prompt lengths times this (``oximeter traffic --prompt-scale``): engines on CPUs need shorter ones.
    prompt_scale: float = 1.0
    day_seconds: float = 86400.0
    daily_shape: bool = True  # the history's daily_shape: False keeps traffic at its base rate all day
    # The gateways' limits: the simulated fleet's (its backfilled history runs the same).
    max_concurrency: int = int(FLEET_GATEWAY["max_concurrency"])
    max_queue: int = _GATEWAY.max_queue
    max_queue_wait_s: float = FLEET_GATEWAY["max_queue_wait_s"]
    # "stock": the fleet as a stock one presents it: no gateways (traffic straight to the engines),
    # exporters as dcgm-exporter with its default counters, kube-state-metrics from the simulator,
    # Prometheus with the adapter rules (docs/stock-telemetry.md).
    telemetry: str = "oximeter"
    # Real vLLM engines (the CPU build, stack/vllm/) instead of the simulator's, one per node, with
    # these flags: each node's exporter then reads its host alone (a CPU host has no GPU) and there
    # is no simulated backfill.
    vllm: EngineSpec | None = None
    # Real engines already serving, by node (their caller started them and stops them): the stack
    # starts none and fronts these, as it would the engines of ``vllm``.
    engine_urls: Mapping[str, str] | None = None
    addons: tuple[Addon, ...] = ()

    @property
    def real_engines(self) -> bool:
        """Whether the engines are real vLLM ones (no simulator, so no GPUs and no Kubernetes to read)."""
        return self.vllm is not None or self.engine_urls is not None


@dataclass(frozen=True)
class Endpoints:
    """Every URL of a started (or planned) stack."""

    simulator: str  # node n1's engine port also serves the admin and fleet API
    engines: dict[str, str]
    exporters: dict[str, str]
    gateways: dict[str, str]
    prometheus: str
    alertmanager: str | None
    redis: str | None
    addons: dict[str, str]


class Observer(Protocol):
    """Told about each step (the demo shows progress bars with it)."""

    def step(self, name: str, detail: str) -> None:
        """``name`` is starting (``detail`` says what)."""

    def done(self, name: str) -> None:
        """``name`` is ready."""


class QuietObserver:
    """An observer that ignores every step (tests)."""

    def step(self, name: str, detail: str) -> None:
        pass

    def done(self, name: str) -> None:
        pass
