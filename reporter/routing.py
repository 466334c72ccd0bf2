"""Which chat channels a message goes to, by severity, layer and service (``reporter.routes``).

Every route whose ``match`` holds sends to its channels (the union, in config order); a message
no route matches goes to every configured channel, so an unrouted incident is never dropped.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from reporter.settings import RouteSettings


@dataclass(frozen=True)
class Route:
    """One rule: each key must equal one of its allowed values; ``channels`` receive the message."""

    match: tuple[tuple[str, frozenset[str]], ...]
    channels: tuple[str, ...]

    @classmethod
    def of(cls, settings: RouteSettings) -> Route:
        """From the config model (a single string is one allowed value)."""
        match = tuple(sorted((str(key), frozenset([value] if isinstance(value, str) else value))
                             for key, value in settings.match.items()))
        return cls(match, tuple(settings.channels))

    def matches(self, labels: Mapping[str, Sequence[str]]) -> bool:
        """True when every key has one of its allowed values among ``labels[key]``."""
        return all(allowed & set(labels.get(key, ())) for key, allowed in self.match)


@dataclass(frozen=True)
class Router:
    """The configured routes over the configured channel names."""

    routes: tuple[Route, ...]
    channels: tuple[str, ...]

    @classmethod
    def from_settings(cls, routes: Iterable[RouteSettings], channels: Iterable[str]) -> Router:
        """Routes from ``reporter.routes``; ``channels`` are the configured channel names."""
        return cls(tuple(Route.of(r) for r in routes), tuple(channels))

    def unknown_channels(self) -> list[str]:
        """Channel names routes refer to that are not configured (``config check`` reports them)."""
        known = set(self.channels)
        return sorted({c for r in self.routes for c in r.channels if c not in known})

    def channels_for(self, *, severity: str, layer: str = "", services: Sequence[str] = ()) -> list[str]:
        """Channel names for a message; several services match a route if any one does."""
        labels = {"severity": [severity], "layer": [layer] if layer else [], "service": list(services)}
        chosen: list[str] = []
        for route in self.routes:
            if route.matches(labels):
                chosen += [c for c in route.channels if c in self.channels and c not in chosen]
        return chosen if any(r.matches(labels) for r in self.routes) else list(self.channels)
