"""External queue lengths from Redis (work waiting outside the gateway): lists by LLEN, streams by XLEN.

``redis`` is imported lazily so an exporter without queues never needs it. Redis being down is a
counted error and the queue series are absent for that scrape; the scrape itself still succeeds.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from exporter.settings import QueueSpec
from oximeter.errors import ConfigError

log = logging.getLogger(__name__)


def read_password(env_name: str) -> str | None:
    """The Redis password from ``$env_name`` or the file named by ``$env_name_FILE``; never argv.

    A file that cannot be read is a ``ConfigError`` naming the variable and the path.
    """
    value = os.environ.get(env_name)
    if value is None:
        file_name = os.environ.get(f"{env_name}_FILE")
        if file_name:
            try:
                value = Path(file_name).read_text(encoding="utf-8").rstrip("\r\n")
            except (OSError, UnicodeDecodeError) as exc:
                # The path is not secret; the content is never read into the message.
                reason = getattr(exc, "strerror", None) or "not UTF-8 text"
                raise ConfigError([f"{env_name}_FILE: cannot read {file_name}: {reason}"]) from None
    return value or None


class RedisQueues:
    """Reads every configured queue with one pipelined round trip per scrape."""

    def __init__(self, url: str, specs: Sequence[QueueSpec], *, timeout_s: float = 0.5,
                 password: str | None = None) -> None:
        import redis  # lazy: only exporters with external queues need it

        self._redis = redis
        self.specs = tuple(specs)
        self._client: Any = redis.Redis.from_url(
            url, password=password, socket_timeout=timeout_s, socket_connect_timeout=timeout_s,
            retry_on_timeout=False)

    def read(self) -> tuple[dict[str, int], list[str]]:
        """(length by queue name, error reasons); a failed queue is missing from the dict."""
        pipe = self._client.pipeline(transaction=False)
        for spec in self.specs:
            if spec.kind == "stream":
                pipe.xlen(spec.key)
            else:
                pipe.llen(spec.key)
        try:
            replies = pipe.execute(raise_on_error=False)
        except self._redis.RedisError as exc:
            # Only the exception class: its text may carry the URL, never the password, but stay terse.
            log.warning("redis unavailable: %s", type(exc).__name__)
            return {}, ["redis"]
        lengths: dict[str, int] = {}
        errors: list[str] = []
        for spec, reply in zip(self.specs, replies, strict=True):
            if isinstance(reply, Exception):
                log.warning("queue %s (%s %s): %s", spec.name, spec.kind, spec.key, type(reply).__name__)
                errors.append("redis")
            else:
                lengths[spec.name] = int(reply)
        return lengths, errors

    def close(self) -> None:
        """Drop the connection pool."""
        self._client.close()
