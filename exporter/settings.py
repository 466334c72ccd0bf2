"""Settings of ``oximeter exporter`` (the ``exporter:`` section; CLI flags override them).

A stdlib dataclass, not pydantic, so the exporter runs on a GPU host with only its small set of
dependencies; ``oximeter/config.py`` still embeds it (pydantic validates stdlib dataclasses, and
``__post_init__`` runs there too). ``from_mapping`` is the exporter's own path from YAML; types are
checked by ``oximeter/plain_settings.py``, the exporter's own rules below.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from exporter.backends import BACKENDS
from oximeter.plain_settings import as_list, check_fields, from_mapping

NAMINGS = ("oximeter", "dcgm", "dcgm-exporter")
QUEUE_KINDS = ("list", "stream")


@dataclass(frozen=True)
class QueueSpec:
    """One external queue: a Redis list (LLEN) or stream (XLEN) exported under ``name``."""

    __pydantic_config__: ClassVar[dict[str, Any]] = {"extra": "forbid"}

    # Value of the ``queue`` label on oximeter_external_queue_length.
    name: str
    # The Redis key holding the list or stream.
    key: str
    # "list" (length by LLEN) or "stream" (length by XLEN).
    kind: str = "list"

    def __post_init__(self) -> None:
        check_fields(self)
        if not self.name or not self.key:
            raise ValueError("name and key must not be empty")
        if self.kind not in QUEUE_KINDS:
            raise ValueError(f"kind: must be one of {', '.join(QUEUE_KINDS)}, got {self.kind!r}")


@dataclass(frozen=True)
class ExporterSettings:
    """The exporter: which backend, where to listen, what else to read. Safe defaults throughout."""

    __pydantic_config__: ClassVar[dict[str, Any]] = {"extra": "forbid"}

    # Where GPU readings come from: "nvml" (real GPUs) or "sim" (the simulator's engines).
    backend: str = "nvml"
    node: str = ""                       # "" = this host's name, resolved at start-up
    # Address /metrics listens on; loopback by default, so nothing outside the host reaches it.
    host: str = "127.0.0.1"
    # Port of /metrics (0: the kernel picks one); 9400 is dcgm-exporter's port, which it stands in for.
    port: int = 9400
    # "oximeter": our own metric names; "dcgm": also dcgm-exporter 4.x names; "dcgm-exporter": only
    # those, and only its default counters (as a stock fleet exports them: no ECC fields)
    naming: str = "oximeter"
    # The simulated engine the "sim" backend reads its GPUs from.
    sim_url: str = "http://127.0.0.1:8100"
    # Seconds the "sim" backend waits for the simulator per scrape.
    sim_timeout_s: float = 2.0
    gpu_timeout_s: float = 2.0           # a GPU that has not answered by then is reported down
    # Process names whose resident memory is exported per host (empty: none).
    process_names: tuple[str, ...] = ("vllm",)
    redis_url: str = ""                  # "" = no external queues; password from redis_password_env
    # Name of the env var (or ``<NAME>_FILE``) holding Redis's password; never the password itself.
    redis_password_env: str = "OXIMETER_REDIS_PASSWORD"
    # Seconds one Redis call may take per scrape; short, so a slow Redis does not stall the scrape.
    redis_timeout_s: float = 0.5
    # External Redis queues whose lengths are exported (need redis_url).
    queues: tuple[QueueSpec, ...] = ()

    def __post_init__(self) -> None:
        check_fields(self)
        if self.backend not in BACKENDS:
            raise ValueError(f"backend: must be one of {', '.join(sorted(BACKENDS))}, got {self.backend!r}")
        if self.naming not in NAMINGS:
            raise ValueError(f"naming: must be one of {', '.join(NAMINGS)}, got {self.naming!r}")
        if not 0 <= self.port <= 65535:  # 0: the kernel picks one (see --port-file)
            raise ValueError(f"port: must be between 0 and 65535, got {self.port}")
        for key in ("sim_timeout_s", "gpu_timeout_s", "redis_timeout_s"):
            value = getattr(self, key)
            if not 0 < value <= 60:
                raise ValueError(f"{key}: must be > 0 and <= 60 seconds, got {value}")
        if not self.sim_url.startswith(("http://", "https://")):
            raise ValueError(f"sim_url: must start with http:// or https://, got {self.sim_url!r}")
        if self.redis_url and not self.redis_url.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError("redis_url: must start with redis://, rediss:// or unix://")
        if "@" in self.redis_url:
            # A password in the URL would end up in the config file and in error messages.
            raise ValueError(f"redis_url: put the password in ${self.redis_password_env}, not the URL")
        names = [q.name for q in self.queues]
        if len(set(names)) != len(names):
            raise ValueError("queues: names must be unique")
        if self.queues and not self.redis_url:
            raise ValueError("queues: need redis_url")

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any] | None) -> ExporterSettings:
        """Build from the ``exporter:`` YAML mapping; ValueError names the key."""
        if isinstance(data, Mapping) and "queues" in data:
            queues = as_list("queues", data["queues"])
            data = {**data, "queues": tuple(_queue(i, item) for i, item in enumerate(queues))}
        return from_mapping(cls, data)


def _queue(i: int, item: object) -> QueueSpec:
    """``queues[i]`` of the YAML section."""
    if not isinstance(item, Mapping):
        raise ValueError(f"queues[{i}]: expected a mapping")
    extra = sorted(set(item) - {f.name for f in dataclasses.fields(QueueSpec)})
    if extra:
        raise ValueError(f"queues[{i}].{extra[0]}: unknown key")
    try:
        return QueueSpec(**item)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"queues[{i}]: {exc}") from None
