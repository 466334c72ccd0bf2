"""Messages the outbox could not store (a full disk): sent straight to every channel that works,
kept in memory, and written to the outbox once it can write again.

A page must not wait for disk space. The rows are written later with the channels that already
received the message marked sent, so the outbox's idempotency key keeps the worker from sending
them twice; the channels that failed get a pending row and the worker's retries.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from loguru import logger

from reporter.channels import Channel
from reporter.channels.base import Outcome
from reporter.message import Message
from reporter.outbox import Outbox


@dataclass
class Held:
    """One message not yet in the outbox, and the channels that have it already."""

    message: Message
    channels: tuple[str, ...]
    delivered: set[str] = field(default_factory=set)


class HeldMessages:
    """What the outbox owes the store, by idempotency key."""

    def __init__(self) -> None:
        self.held: dict[str, Held] = {}

    def __len__(self) -> int:
        return len(self.held)

    def hold(self, message: Message, channels: Iterable[str], available: dict[str, Channel],
             reason: BaseException) -> None:
        """Keep ``message`` and send it now on every one of ``channels`` that answers."""
        key = message.idempotency_key or ""
        if key in self.held:
            return
        entry = self.held[key] = Held(message, tuple(channels))
        for name in entry.channels:
            channel = available.get(name)
            if channel is not None and channel.send(message).outcome is Outcome.SENT:
                entry.delivered.add(name)
        logger.error("outbox: the store cannot write ({}): {!r} sent directly to {} of {} channel(s), "
                     "held in memory until it can", reason, message.title[:80], len(entry.delivered),
                     len(entry.channels))

    def write(self, outbox: Outbox, now: float) -> None:
        """Write what is held to ``outbox`` (raises ``sqlite3.Error`` while it still cannot)."""
        for key, entry in list(self.held.items()):
            outbox.enqueue(entry.message, entry.channels, now=now, delivered=entry.delivered)
            del self.held[key]
            logger.info("outbox: held message {} written to the store", key)

