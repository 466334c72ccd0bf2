"""Active/standby analyzers: the lease holder of a shard leads, the others stand by.

Every analyzer runs the same cycles, so a standby's windows, baselines and source health are as
warm as the leader's. Only the leader goes on past detection: it opens and resolves incidents,
writes them and notifies. Each cycle, right before that write phase, the lease is renewed (or,
by a standby, taken once expired); a task beside the cycles renews it between them too, so a
slow cycle does not lose it, and wakes a standby as soon as the lease it waits on has expired.

Taking over, a new leader rebuilds its incidents from the store (the open ones go on: never a
second "opened"), hands on the change records its predecessor had not (the outbox drops any it
had queued already: same key), writes a timeline entry on every open incident and sends one
platform notice, keyed by the lease's epoch, so it is told once however many standbys race for it.
A leader that stops cleanly releases the lease, and its successor takes over without waiting
(a hand-over: logged, not announced). The leader also tells, once, of every other shard whose
leader has been gone for longer than a lease.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import sqlite3
from datetime import UTC, datetime

from loguru import logger

from analyzer.detection.events import iso_utc
from analyzer.incidents.model import Change, Incident, TimelineEntry
from analyzer.incidents.store import IncidentStore
from analyzer.service.daemon_metrics import Notifier
from oximeter.lease import Grant, Lease


class Gate:
    """A notifier that passes messages on only while ``open`` (while this analyzer leads)."""

    def __init__(self, inner: Notifier) -> None:
        self.inner, self.open = inner, False

    def notify(self, change: Change, incident: Incident | None) -> None:
        """Tell a change, when leading."""
        if self.open:
            self.inner.notify(change, incident)

    def notice(self, key: str, text: str) -> None:
        """Send an operational notice, when leading."""
        if self.open:
            self.inner.notice(key, text)


def _at(seconds: float) -> str:
    return iso_utc(datetime.fromtimestamp(seconds, UTC)) or ""


class Leadership:
    """This analyzer's side of its shard's lease, and the gate its notifications pass."""

    def __init__(self, lease: Lease, gate: Gate, renew_s: float) -> None:
        self.lease, self.gate, self.renew_s = lease, gate, renew_s
        self.epoch: int | None = None  # the epoch of the lease we hold; None while standing by
        self.wake = asyncio.Event()

    @property
    def leading(self) -> bool:
        """Whether this analyzer holds its shard's lease (as of its last look)."""
        return self.epoch is not None

    def check(self) -> tuple[bool, Grant | None]:
        """Hold, renew or take the lease: whether we lead now, and the grant when we only just
        came to lead (first start, take-over or hand-over)."""
        grant = self.lease.hold()
        became = grant.leader and self.epoch != grant.epoch
        if self.leading and not grant.leader:
            logger.warning("analyzer: lost the lease of shard {} to {}; standing by",
                           self.lease.shard, grant.holder)
        self._set(grant.epoch if grant.leader else None)
        return grant.leader, grant if became else None

    def _set(self, epoch: int | None) -> None:
        self.epoch = epoch
        self.gate.open = epoch is not None

    def take_over(self, store: IncidentStore, grant: Grant, now: datetime) -> None:
        """Record a take-over from a holder whose lease lapsed: a timeline entry on every open
        incident and one notice (a first start or a hand-over is only logged)."""
        shard = self.lease.shard
        if grant.previous is None or grant.released or grant.previous_expired_at is None:
            logger.info("analyzer: leading shard {} (lease epoch {}{})", shard, grant.epoch,
                        f", handed over by {grant.previous}" if grant.previous else "")
            return
        gap_s = max(0.0, self.lease.clock() - grant.previous_expired_at) + self.lease.duration_s
        text = (f"analyzer {self.lease.holder} took over shard {shard} from {grant.previous}, whose lease "
                f"lapsed at {_at(grant.previous_expired_at)}: detection had no leader for up to "
                f"{gap_s:.0f} s (lease epoch {grant.epoch})")
        logger.warning("analyzer: {}", text)
        opened = [i for i in store.tracked(now, 0.0) if i.state == "open"]
        store.save([dataclasses.replace(i, timeline=(*i.timeline, TimelineEntry(now, "takeover", text)))
                    for i in opened])
        self.gate.notice(f"analyzer:takeover:{shard}:{grant.epoch}", text)

    def report_lapsed(self) -> None:
        """Tell, once across all analyzers, of each other shard left without a leader."""
        for lapsed in self.lease.claim_lapsed():
            how = "stopped" if lapsed.released else "stopped renewing its lease"
            self.gate.notice(f"analyzer:shard_lapsed:{lapsed.shard}:{lapsed.epoch}",
                             f"shard {lapsed.shard} has no analyzer: its leader {lapsed.holder} {how} at "
                             f"{_at(lapsed.expired_at)} and none has taken over; its fleet is not "
                             "being watched")

    def tick(self) -> bool:
        """Between cycles: a leader renews its lease (stepping down if it was taken); for a standby,
        whether the leader's lease has expired, so that its cycle should run now."""
        if self.epoch is not None:
            if not self.lease.renew(self.epoch):
                logger.warning("analyzer: the lease of shard {} was taken; standing by", self.lease.shard)
                self._set(None)
            return False
        current = self.lease.current()
        return current is None or current.expires_at <= self.lease.clock()

    async def keep(self, stop: asyncio.Event) -> None:
        """Run ``tick`` every ``renew_s`` until ``stop``, waking the cycle when it says so."""
        while not stop.is_set():
            try:
                # The store is read in a thread; the event is set here, on the loop's own thread.
                if await asyncio.to_thread(self.tick):
                    self.wake.set()
            except sqlite3.Error as exc:
                logger.error("analyzer: cannot renew or read the lease: {}", exc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.renew_s)

    def release(self) -> None:
        """A clean stop, once the last cycle is done: hand the lease on at once if held."""
        if self.epoch is None:
            return
        try:
            self.lease.release()
        except sqlite3.Error as exc:
            logger.error("analyzer: cannot release the lease (it lapses by itself): {}", exc)
        self._set(None)

    async def pause(self, stop: asyncio.Event, timeout_s: float) -> None:
        """Wait until ``stop``, a wake-up or ``timeout_s``, whichever comes first."""
        waits = [asyncio.create_task(stop.wait()), asyncio.create_task(self.wake.wait())]
        try:
            await asyncio.wait(waits, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in waits:
                task.cancel()
            self.wake.clear()
