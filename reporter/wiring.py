"""Everything the analyzer daemon needs from the reporter, built from the config in one call.

``oximeter analyze`` (``analyzer/service/daemon.py``) wires it in four lines::

    reporting = build_reporting(store, config.reporter, read_secret(token_env), metrics.registry)
    analyzer = Analyzer(..., notifier=reporting.notifier, ...)
    reporting.mount(app)                                   # POST /api/alertmanager
    tasks = asyncio.create_task(reporting.run(stop))       # outbox delivery + daily digest
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time as _time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date

from aiohttp import web
from loguru import logger
from prometheus_client import CollectorRegistry
from pydantic import SecretStr

from analyzer.incidents.store import IncidentStore
from analyzer.service.api_requests import CLOCK
from analyzer.signals.catalogue import CATALOGUE
from analyzer.signals.slo import SloSettings
from analyzer.signals.spec import SignalSpec
from oximeter.claims import Claims
from oximeter.errors import OximeterError
from oximeter.secrets import read_secret
from reporter import callbacks, chart_link, digest_render, digest_schedule
from reporter.channels import build_channels
from reporter.outbox import Outbox, OutboxPolicy
from reporter.prom import digest_client
from reporter.relay import Relay, mount
from reporter.render import OutboxNotifier
from reporter.routing import Router
from reporter.settings import ReporterSettings
from reporter.worker import deliver_forever


@dataclass
class Reporting:
    """The outbox, the incident notifier, the Alertmanager relay and the digest scheduler."""

    settings: ReporterSettings
    outbox: Outbox
    notifier: OutboxNotifier
    relay: Relay
    scheduler: digest_schedule.DigestScheduler
    # Chat platforms' secrets for verifying button callbacks (None: that platform's route refuses).
    slack_signing_secret: SecretStr | None = None
    feishu_verification_token: SecretStr | None = None

    def mount(self, app: web.Application) -> None:
        """Add the relay's route, the chat button callbacks and the digest's charts to the analyzer API."""
        mount(app, self.relay)
        callbacks.mount(app, callbacks.ChatCallbacks(self.relay.store, self.slack_signing_secret,
                                                     self.feishu_verification_token, clock=app[CLOCK]))
        chart_link.mount(app, self.outbox.conn)

    async def run(self, stop: asyncio.Event) -> None:
        """Deliver the outbox and send the digest until ``stop`` is set (no channels: no digest)."""
        loops = [deliver_forever(self.outbox, stop, self.settings.deliver_interval_s),
                 self._watch(stop)]
        if self.outbox.channels:
            loops.append(digest_schedule.digest_forever(self.scheduler, stop))
        await asyncio.gather(*loops)

    async def _watch(self, stop: asyncio.Event, interval_s: float = 30.0) -> None:
        while not stop.is_set():
            try:
                await asyncio.to_thread(self.relay.check_watchdog)
            except (sqlite3.Error, OximeterError) as exc:
                logger.error("relay: watchdog check failed: {}", exc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=interval_s)


def build_reporting(store: IncidentStore, settings: ReporterSettings, token: SecretStr | None,
                    registry: CollectorRegistry | None = None,
                    catalogue: Mapping[str, SignalSpec] = CATALOGUE,
                    slos: SloSettings | None = None) -> Reporting:
    """Build from the ``reporter:`` section; channels read their URLs and secrets from the environment.
    ``catalogue``: the signals the digest's chart draws, with the configuration's overrides; ``slos``:
    the objectives the digest shows the budgets of."""
    outbox = Outbox(store.conn, build_channels(settings.channels), OutboxPolicy.from_settings(settings),
                    registry=registry)
    router = Router.from_settings(settings.routes, outbox.channels)
    prom = digest_client(settings.digest)

    def send_day(day: date) -> None:
        digest_schedule.send_unless_empty(prom, store, outbox, day, settings, catalogue=catalogue, slos=slos)

    claims = Claims(store.conn, outbox.worker_id)
    scheduler = digest_schedule.DigestScheduler(
        settings, send_day, sent=lambda day: digest_schedule.already_queued(outbox, day),
        claim=lambda day: claims.take(digest_render.digest_key(day), _time.time(), digest_schedule.CLAIM_S))
    return Reporting(settings, outbox, OutboxNotifier(outbox, settings, router),
                     Relay(store, outbox, settings, token, router, registry=registry), scheduler,
                     read_secret("OXIMETER_SLACK_SIGNING_SECRET"),
                     read_secret("OXIMETER_FEISHU_VERIFICATION_TOKEN"))
