"""Analyzers sharing a store each run the digest's scheduler: the one that claims the day builds
it, the others wait for its rows, and take over when the claimer died without queuing them."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

from pg_server import StoreSpace
from pydantic import SecretStr

from analyzer.incidents.store import IncidentStore
from oximeter.claims import Claims
from oximeter.store import connect
from reporter.digest_render import digest_key
from reporter.digest_schedule import CLAIM_S, DigestScheduler
from reporter.settings import DigestSettings, ReporterSettings
from reporter.wiring import build_reporting

MORNING = datetime(2025, 12, 1, 6, 30, tzinfo=UTC)
DAY = date(2025, 11, 30)


def test_one_of_two_analyzers_builds_the_day_and_the_other_replaces_it_once_its_claim_expires(
        stores: StoreSpace) -> None:
    settings = ReporterSettings(digest=DigestSettings(timezone="UTC", time="06:30"))
    path = stores / "digest.db"
    conns = [connect(path), connect(path)]
    built: list[tuple[str, date]] = []
    queued: set[date] = set()
    try:
        def scheduler(name: str, conn_index: int, queues: bool) -> DigestScheduler:
            claims = Claims(conns[conn_index], name)

            def send_day(day: date) -> None:
                built.append((name, day))
                if queues:
                    queued.add(day)

            return DigestScheduler(settings, send_day, sent=queued.__contains__,
                                   claim=lambda day: claims.take(digest_key(day), now[0].timestamp(),
                                                                 CLAIM_S))

        now = [MORNING]
        # The first dies while building: it claimed the day, and queued nothing.
        dying, survivor = scheduler("a", 0, queues=False), scheduler("b", 1, queues=True)
        assert dying.tick(now[0]) == DAY
        assert survivor.tick(now[0]) is None
        now[0] += timedelta(seconds=CLAIM_S - 1)
        assert survivor.tick(now[0]) is None
        assert built == [("a", DAY)]
        now[0] += timedelta(seconds=1)
        assert survivor.tick(now[0]) == DAY
        assert built == [("a", DAY), ("b", DAY)]
        # Once queued, a third analyzer does not build the day again, claim or not.
        late = scheduler("c", 0, queues=True)
        assert late.tick(now[0] + timedelta(hours=1)) is None
        assert built == [("a", DAY), ("b", DAY)]
    finally:
        for conn in conns:
            conn.close()


def test_two_analyzers_wired_on_one_store_claim_the_day_once(stores: StoreSpace) -> None:
    path = stores / "wired.db"
    stores_of = [IncidentStore(connect(path)), IncidentStore(connect(path))]
    try:
        first, second = (build_reporting(store, ReporterSettings(), SecretStr("t")) for store in stores_of)
        assert (first.scheduler.claim(DAY), second.scheduler.claim(DAY)) == (True, False)
        assert second.scheduler.claim(DAY + timedelta(days=1))  # the next day is anyone's
    finally:
        for store in stores_of:
            store.conn.close()
