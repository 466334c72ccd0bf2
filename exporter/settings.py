"""Settings of ``oximeter exporter`` (the ``exporter:`` section; CLI flags override them).

A stdlib dataclass, not pydantic, so the exporter runs on a GPU host with only its small set of
dependencies; ``oximeter/config.py`` still embeds it (pydantic validates stdlib dataclasses, and
``__post_init__`` runs there too). ``from_mapping`` is the exporter's own path from YAML.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from exporter.backends import BACKENDS
from oximeter.plain_settings import as_list, check_type

NAMINGS = ("oximeter", "dcgm", "dcgm-exporter")
QUEUE_KINDS = ("list", "stream")


@dataclass(frozen=True)
class QueueSpec:
    """One external queue: a Redis list (LLEN) or stream (XLEN) exported under ``name``."""

    __pydantic_config__: ClassVar[dict[str, Any]] = {"extra": "forbid"}

    name: str
    key: str
    kind: str = "list"

    def __post_init__(self) -> None:
        check_type("name", self.name, str)
        check_type("key", self.key, str)
        if not self.name or not self.key:
            raise ValueError("name and key must not be empty")
        if self.kind not in QUEUE_KINDS:
            raise ValueError(f"kind: must be one of {', '.join(QUEUE_KINDS)}, got {self.kind!r}")


@dataclass(frozen=True)
class ExporterSettings:
    """The exporter: which backend, where to listen, what else to read. Safe defaults throughout."""

    __pydantic_config__: ClassVar[dict[str, Any]] = {"extra": "forbid"}

    backend: str = "nvml"
    node: str = ""                       # "" = this host's name, resolved at start-up
    host: str = "127.0.0.1"
    port: int = 9400
    # "oximeter": our own metric names; "dcgm": also dcgm-exporter 4.x names; "dcgm-exporter": only
    # those, and only its default counters (as a stock fleet exports them: no ECC fields)
    naming: str = "oximeter"
    sim_url: str = "http://127.0.0.1:8100"
    sim_timeout_s: float = 2.0
    gpu_timeout_s: float = 2.0           # a GPU that has not answered by then is reported down
    process_names: tuple[str, ...] = ("vllm",)
    redis_url: str = ""                  # "" = no external queues; the password comes from redis_password_env
    redis_password_env: str = "OXIMETER_REDIS_PASSWORD"
    redis_timeout_s: float = 0.5
    queues: tuple[QueueSpec, ...] = ()

    def __post_init__(self) -> None:
        for key in ("backend", "node", "host", "naming", "sim_url", "redis_url", "redis_password_env"):
            check_type(key, getattr(self, key), str)
        if self.backend not in BACKENDS:
            raise ValueError(f"backend: must be one of {', '.join(sorted(BACKENDS))}, got {self.backend!r}")
        if self.naming not in NAMINGS:
            raise ValueError(f"naming: must be one of {', '.join(NAMINGS)}, got {self.naming!r}")
        check_type("port", self.port, int)
        if not 0 <= self.port <= 65535:  # 0: the kernel picks one (see --port-file)
            raise ValueError(f"port: must be between 0 and 65535, got {self.port}")
        for key in ("sim_timeout_s", "gpu_timeout_s", "redis_timeout_s"):
            value = getattr(self, key)
            check_type(key, value, (int, float))
            if not 0 < value <= 60:
                raise ValueError(f"{key}: must be > 0 and <= 60 seconds, got {value}")
        if not self.sim_url.startswith(("http://", "https://")):
            raise ValueError(f"sim_url: must start with http:// or https://, got {self.sim_url!r}")
        if self.redis_url and not self.redis_url.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError("redis_url: must start with redis://, rediss:// or unix://")
        if "@" in self.redis_url:
            # A password in the URL would end up in the config file and in error messages.
            raise ValueError(f"redis_url: put the password in ${self.redis_password_env}, not the URL")
        for name in self.process_names:
            check_type("process_names[]", name, str)
        names = [q.name for q in self.queues]
        if len(set(names)) != len(names):
            raise ValueError("queues: names must be unique")
        if self.queues and not self.redis_url:
            raise ValueError("queues: need redis_url")

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any] | None) -> ExporterSettings:
        """Build from the ``exporter:`` YAML mapping; ValueError names the key."""
        if data is None:
            return cls()
        if not isinstance(data, Mapping):
            raise ValueError(f"expected a mapping, got {type(data).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"{unknown[0]}: unknown key")
        values = dict(data)
        if "process_names" in values:
            values["process_names"] = tuple(as_list("process_names", values["process_names"]))
        if "queues" in values:
            queues = []
            for i, item in enumerate(as_list("queues", values["queues"])):
                if not isinstance(item, Mapping):
                    raise ValueError(f"queues[{i}]: expected a mapping")
                extra = sorted(set(item) - {"name", "key", "kind"})
                if extra:
                    raise ValueError(f"queues[{i}].{extra[0]}: unknown key")
                try:
                    queues.append(QueueSpec(**item))
                except (TypeError, ValueError) as exc:
                    raise ValueError(f"queues[{i}]: {exc}") from None
            values["queues"] = tuple(queues)
        return cls(**values)

