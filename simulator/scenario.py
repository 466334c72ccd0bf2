"""Scenario files: a fleet, its traffic, its faults and the true root cause (``scenarios/*.yaml``).

Fault times are durations such as ``90m``, ``1d6h`` or seconds; a negative start counts back
from the end of the history, so one scenario works for any ``--days``. The truth names the
layer, entity and diagnosis rule (analyzer/diagnosis/rules.py) that an analyzer should
report (``rule: none`` for fault-free scenarios).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from gateway.settings import GatewaySettings
from oximeter import inputs, vocabulary
from oximeter.errors import ConfigError
from simulator.defaults import GPUS_PER_NODE, MODEL, NODES, SERVICE, EngineKnobs
from simulator.fault_kinds import FAULT_KINDS

LAYERS = (*vocabulary.LAYERS, "none")  # "none": a fault-free scenario
# Diagnosis rules a truth may name besides those the fault kinds are diagnosed as
# (``simulator/fault_kinds.py``): a slow ECC storm's, the ones no single fault kind causes, and
# "none" for a fault-free scenario.
OTHER_RULES = ("ecc_slow_burn", "empty_outputs", "queue_undrained", "node_not_ready", "restart_loop",
               "unclassified", "none")


def known_rules() -> tuple[str, ...]:
    """Every rule a scenario's truth may name."""
    return (*dict.fromkeys(k.rule for k in FAULT_KINDS.values() if k.rule is not None), *OTHER_RULES)


def parse_duration_s(value: Any) -> float:
    """``90``, ``"90s"``, ``"15m"``, ``"1d6h"``, ``"-2h"`` → seconds (offsets may be negative)."""
    return inputs.parse_duration_s(value, "duration", allow_negative=True)


class Truth(BaseModel):
    """The root cause an analyzer should name."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    layer: str
    entity: dict[str, str] = Field(default_factory=dict)
    rule: str

    @field_validator("layer")
    @classmethod
    def _layer(cls, value: str) -> str:
        if value not in LAYERS:
            raise ValueError(f"unknown layer {value!r} (known: {', '.join(LAYERS)})")
        return value

    @field_validator("rule")
    @classmethod
    def _rule(cls, value: str) -> str:
        rules = known_rules()
        if value not in rules:
            raise ValueError(f"unknown rule {value!r} (known: {', '.join(rules)})")
        return value


class ScenarioFault(BaseModel):
    """One fault as written in a scenario (times as durations; see ``simulator/faults.py``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: str
    node: str
    gpu: int | None = None
    link: int | None = None  # one NVLink of the GPU, for the kinds that hit a single link
    start: float
    duration: float | None = None
    strength: float | None = None
    id: str | None = None

    @field_validator("start", "duration", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> float | None:
        return None if value is None else parse_duration_s(value)


class ScenarioMaintenance(BaseModel):
    """A maintenance window a drill declares (times as durations, counted like a fault's): the
    analyzer replaying the drill is told of it, the simulated fleet is not."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    node: str | None = None
    gpu: int | None = None
    service: str | None = None
    start: float
    duration: float
    reason: str = "planned maintenance"

    @field_validator("start", "duration", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> float:
        return parse_duration_s(value)


_GATEWAY = GatewaySettings()


class GatewayLimits(BaseModel):
    """The gateway in front of each engine (same knobs and defaults as ``oximeter gateway``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_concurrency: int = Field(_GATEWAY.max_concurrency, ge=1)
    max_queue: int = Field(_GATEWAY.max_queue, ge=0)
    max_queue_wait_s: float = Field(_GATEWAY.max_queue_wait_s, gt=0)
    first_byte_timeout_s: float = Field(_GATEWAY.first_byte_timeout_s, gt=0)


class EngineOverrides(EngineKnobs):
    """Engine knobs a scenario may change (defaults: ``simulator/defaults.py``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # History runs coarse iterations (several tokens each) so days simulate in seconds.
    tokens_per_iteration: int = Field(8, ge=1)


class TraceTraffic(BaseModel):
    """Traffic replayed from an arrival trace (``simulator/trace.py``) instead of drawn at ``base_rps``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    file: str = Field(description="trace CSV; a relative path counts from the scenario file's folder")
    peak_utilisation: float = Field(0.6, gt=0, description=(
        "load in the trace's busiest minute at the busiest hour, 0-1 of the fleet's capacity"))


# What the fleet presents: Oximeter's gateway in front of each engine and Oximeter's exporter, or a
# stock fleet (no gateway, dcgm-exporter with its default counters, vLLM's and kube-state-metrics'
# own series; see docs/stock-telemetry.md).
Telemetry = Literal["oximeter", "stock"]


class Scenario(BaseModel):
    """A whole scenario file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    description: str = ""
    nodes: int = Field(NODES, ge=1)
    gpus_per_node: int = Field(GPUS_PER_NODE, ge=1)
    model: str = MODEL
    service: str = SERVICE
    seed: int = 0
    base_rps: float = Field(1.0, gt=0, description="daily mean requests per second, per node")
    weekend_factor: float = Field(1.0, gt=0, description="traffic multiplier on Saturdays and Sundays")
    # False: a flat base_rps all day, so a short live run can replay the history's exact arrivals.
    daily_shape: bool = Field(True, description="follow the daily traffic shape around base_rps")
    # Set: arrivals and token counts come from the trace, scaled to the fleet; base_rps is unused.
    trace: TraceTraffic | None = None
    engine: EngineOverrides = EngineOverrides()
    gateway: GatewayLimits = GatewayLimits()
    telemetry: Telemetry = "oximeter"
    faults: list[ScenarioFault] = Field(default_factory=list)
    truth: Truth
    # Further independent root causes in the same scenario (confounders), ranked after ``truth``.
    also: list[Truth] = Field(default_factory=list)
    # Planned work the analyzer is told of; the history does not depend on it.
    maintenance: list[ScenarioMaintenance] = Field(default_factory=list)


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a scenario file; ConfigError names the file and key."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError([f"cannot read file: {exc.strerror}"], str(path)) from None
    except UnicodeDecodeError as exc:
        raise ConfigError([f"not UTF-8 text (byte {exc.start}): save the file as UTF-8"], str(path)) from None
    except (yaml.YAMLError, ValueError, RecursionError) as exc:  # ValueError: e.g. a date 2026-02-30
        raise ConfigError([f"invalid YAML: {exc}"], str(path)) from None
    try:
        sc = Scenario.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(
            [f"{'.'.join(str(p) for p in e['loc']) or '<root>'}: {e['msg']}" for e in exc.errors()], str(path)
        ) from None
    if sc.trace is not None:
        sc = with_trace(sc, str(path.parent / sc.trace.file), sc.trace.peak_utilisation)
    return sc


def with_trace(sc: Scenario, file: str, peak_utilisation: float) -> Scenario:
    """``sc`` with its traffic replayed from trace ``file`` (an absolute path, so caches and
    worker processes read the same file whatever their working folder)."""
    if not peak_utilisation > 0:
        raise ConfigError([f"trace.peak_utilisation: must be > 0, got {peak_utilisation}"], file)
    trace = TraceTraffic(file=str(Path(file).resolve()), peak_utilisation=peak_utilisation)
    return sc.model_copy(update={"trace": trace})
