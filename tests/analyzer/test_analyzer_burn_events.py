"""Fast burns become ``slo_burn`` events: opened in the cycle they are seen, cleared when they stop."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from analyzer.diagnosis.burn import WINDOWS_S, Burn
from analyzer.diagnosis.burn_events import MIN_BAD, BurnWatch
from analyzer.diagnosis.case import BURN_SIGNAL
from analyzer.signals.slo import SloSettings

SLOS = SloSettings()
N1 = (("node", "n1"), ("service", "chat"))
T0 = datetime(2026, 1, 7, 15, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)


def _burn(rate_5m: float, bad_5m: float, oldest_s: float = 0.0) -> Burn:
    rates = dict.fromkeys(WINDOWS_S, 1.0) | {"5m": rate_5m}
    return Burn("requests", "availability", N1, rates, 0.001, oldest_s, 1.0, {"5m": bad_5m})


@pytest.mark.parametrize(("burn", "opens"), [
    (_burn(20.0, MIN_BAD), True),
    (_burn(14.0, 50.0), False),  # under the fast burn
    (_burn(200.0, MIN_BAD - 1), False),  # a fast rate from a handful of answers at night
    (_burn(0.0, 0.0, oldest_s=75.0), True),  # a stuck queue: nothing finishes, so nothing is counted
])
def test_what_opens_at_once(burn: Burn, opens: bool) -> None:
    got = BurnWatch(SLOS, keep_s=900).events([burn], T0)
    assert [e.signal for e in got] == ([BURN_SIGNAL] if opens else [])


def test_an_event_keeps_its_onset_while_it_burns_and_clears_when_it_stops() -> None:
    watch = BurnWatch(SLOS, keep_s=900)
    [first] = watch.events([_burn(20.0, 10.0)], T0)
    [later] = watch.events([_burn(60.0, 30.0)], T0 + MINUTE)
    assert (first.onset, later.onset, later.value, later.cleared_at) == (T0, T0, 60.0, None)
    assert later.labels == N1 and later.layer == "ingress"
    assert "requests availability budget 60×" in later.reason
    [cleared] = watch.events([_burn(3.0, 2.0)], T0 + 2 * MINUTE)
    assert (cleared.onset, cleared.cleared_at) == (T0, T0 + 2 * MINUTE)
    # Kept for correlation's lookback, then gone; burning again is a new event.
    assert watch.events([], T0 + 2 * MINUTE + timedelta(seconds=900)) != []
    assert watch.events([], T0 + 2 * MINUTE + timedelta(seconds=901)) == []
    [again] = watch.events([_burn(20.0, 10.0)], T0 + 20 * MINUTE)
    assert (again.onset, again.cleared_at) == (T0 + 20 * MINUTE, None)
