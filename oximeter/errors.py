"""One root for every error Oximeter raises on purpose."""

from __future__ import annotations


class OximeterError(Exception):
    """Base class of Oximeter's own errors."""


class ConfigError(OximeterError, ValueError):
    """Invalid configuration: the message names the file, the key and the problem."""

    def __init__(self, problems: list[str], path: str | None = None) -> None:
        self.problems = problems
        self.path = path
        where = path or "<config>"
        super().__init__("\n".join(f"{where}: {p}" for p in problems))


class SecretMissingError(ConfigError):
    """A secret named in the configuration is not available in the environment or its file."""


class DependencyError(OximeterError):
    """A dependency (Prometheus, Redis, a chat service) failed after retries."""


class StoreError(OximeterError):
    """The store could not be opened or migrated."""
