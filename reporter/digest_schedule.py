"""Build and send the digest, and the once-a-day scheduler the analyzer daemon runs.

The scheduler sends yesterday's digest at the configured local time (default 08:00, host zone),
once per day: the outbox key ``digest:<date>`` is unique per channel, and a restarted daemon sees
the row and does not query Prometheus again. Analyzers sharing a store (replicas, shards) each run
a scheduler; the one that claims the day in the store builds it, and the others see its rows.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time as _time
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, date, datetime, time, timedelta

from loguru import logger

from analyzer.incidents.store import IncidentStore
from analyzer.service.limits import limits
from analyzer.signals.catalogue import CATALOGUE
from analyzer.signals.slo import SloSettings
from analyzer.signals.spec import SignalSpec
from oximeter.errors import OximeterError
from oximeter.store import lock_for
from reporter.chart import chart_limits, render_chart
from reporter.chart_link import save_chart
from reporter.digest import Digest, collect, zone
from reporter.digest_render import digest_key, to_message
from reporter.message import Message
from reporter.outbox import Outbox
from reporter.prom import PromQuery
from reporter.settings import ReporterSettings


def build(prom: PromQuery, store: IncidentStore | None, day: date, settings: ReporterSettings,
          catalogue: Mapping[str, SignalSpec] = CATALOGUE, slos: SloSettings | None = None
          ) -> tuple[Digest, Message]:
    """Collect ``day`` and render the message with its chart (``catalogue``: the signals it draws and
    their limits, with the configuration's overrides; ``slos``: the objectives whose budgets it shows)."""
    digest = collect(prom, store, day, settings.digest, catalogue=catalogue, slos=slos)
    png = render_chart(digest.chart, f"Oximeter {day.isoformat()}", chart_limits(limits(catalogue), slos),
                       zone(settings.digest.timezone))
    return digest, to_message(digest, settings, png)


def already_queued(outbox: Outbox, day: date) -> bool:
    """Whether some channel already has this day's digest in the outbox."""
    with lock_for(outbox.conn):
        row = outbox.conn.execute("SELECT 1 FROM outbox WHERE idempotency_key = ? LIMIT 1",
                                  (digest_key(day),)).fetchone()
    return row is not None


def empty(digest: Digest) -> bool:
    """Whether the day held nothing to digest: no request, no queue, no GPU and no incident (a day
    before the fleet's telemetry began)."""
    return (not digest.services and not digest.gpu_health and digest.incidents == 0
            and digest.max_queue_length is None)


def send(prom: PromQuery, store: IncidentStore | None, outbox: Outbox, day: date, settings: ReporterSettings,
         channels: Iterable[str] | None = None, now: float | None = None,
         catalogue: Mapping[str, SignalSpec] = CATALOGUE, slos: SloSettings | None = None) -> Message:
    """Queue ``day``'s digest on ``channels`` (default: ``digest.channels``, else every channel)."""
    _, message = build(prom, store, day, settings, catalogue, slos)
    _queue(outbox, message, day, settings, channels, now)
    return message


def send_unless_empty(prom: PromQuery, store: IncidentStore | None, outbox: Outbox, day: date,
                      settings: ReporterSettings, catalogue: Mapping[str, SignalSpec] = CATALOGUE,
                      slos: SloSettings | None = None) -> Message | None:
    """The scheduler's :func:`send`: a day with nothing to digest is logged, not sent (the daemon
    catching up on the day before its telemetry began would post an empty report)."""
    digest, message = build(prom, store, day, settings, catalogue, slos)
    if empty(digest):
        logger.info("digest for {}: no telemetry that day, nothing to send", day)
        return None
    _queue(outbox, message, day, settings, None, None)
    return message


def _queue(outbox: Outbox, message: Message, day: date, settings: ReporterSettings,
           channels: Iterable[str] | None, now: float | None) -> None:
    if message.image_png:  # before it is queued: the link in the message must already resolve
        save_chart(outbox.conn, message.image_png, day.isoformat(), keep=settings.digest.keep_charts)
    chosen = list(channels) if channels is not None else settings.digest.channels
    outbox.enqueue(message, chosen, now=_time.time() if now is None else now)


# How long a claim on a day's digest keeps the other analyzers from building it: longer than a
# build takes with its Prometheus queries retried, short enough that a claimer that died is
# replaced the same morning.
CLAIM_S = 600.0


class DigestScheduler:
    """Calls ``send_day(yesterday)`` once per local day, at or after the configured time, when
    ``claim(day)`` says this process is the one to build it."""

    def __init__(self, settings: ReporterSettings, send_day: Callable[[date], None],
                 sent: Callable[[date], bool] = lambda _day: False,
                 claim: Callable[[date], bool] = lambda _day: True) -> None:
        self.tz = zone(settings.digest.timezone)
        hours, minutes = (int(part) for part in settings.digest.time.split(":"))
        self.at = time(hours, minutes)
        self.send_day, self.sent, self.claim = send_day, sent, claim
        self.last: date | None = None

    def due(self, now: datetime) -> date | None:
        """The day to report on now, or None (too early, or already sent)."""
        local = now.astimezone(self.tz)
        if local.time() < self.at:
            return None
        day = local.date() - timedelta(days=1)
        if day == self.last:
            return None
        if self.sent(day):
            self.last = day
            return None
        return day

    def tick(self, now: datetime) -> date | None:
        """Send when due; a failure (Prometheus down) is logged and retried on the next tick. While
        another process holds the day's claim, this one waits for its rows (or for the claim to
        expire, should that process have died)."""
        day = self.due(now)
        if day is None:
            return None
        try:
            if not self.claim(day):
                return None
            self.send_day(day)
        except (OximeterError, OSError, sqlite3.Error) as exc:
            logger.error("digest for {} not sent, will retry: {}", day, exc)
            return None
        self.last = day
        logger.info("digest for {} queued", day)
        return day


async def digest_forever(scheduler: DigestScheduler, stop: asyncio.Event, interval_s: float = 60.0,
                         clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
    """The daemon's loop: one tick per interval, in a worker thread (it queries over HTTP)."""
    while not stop.is_set():
        await asyncio.to_thread(scheduler.tick, clock())
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=interval_s)
