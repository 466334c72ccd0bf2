"""Fast burns as anomaly events, so that harm opens an incident in the cycle it is seen.

A node whose requests burn an objective's budget at least ``page_fast_burn`` times as fast as its
window allows over the last 5 minutes (with a handful of bad requests behind the rate, so a single
slow answer at night is not a page), or whose queue is stuck, is an ``slo_burn`` event on that
node and service. Correlation puts it with the node's other anomalies and the diagnosis names the
layer and rule from them; alone, it opens a provisional incident ("unclassified", at the ingress
layer) that the rule's own signals confirm or correct within the message budget once their
detectors have held long enough. Until the burn-rate alert's long windows agree, that incident is
a ticket (``analyzer/incidents/harm.py``), raised to a page when they do. Each cycle's burns extend
the events, which clear when the burn falls back.
"""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import datetime, timedelta

from analyzer.detection.events import AnomalyEvent
from analyzer.diagnosis.burn import Burn
from analyzer.diagnosis.case import BURN_SIGNAL, Labels
from analyzer.signals.slo import SloSettings
from analyzer.signals.slo_rules import FAST_PAGE

BURN_DETECTOR = "burn"
# The window a fast burn opens on: the fast page's short one (5 minutes).
SHORT = FAST_PAGE[1]
# Bad requests that window must hold before its rate counts: at a few requests a minute one
# failure is several percent, and the fast burn would page on a single answer.
MIN_BAD = 5.0


def fast(burn: Burn, slos: SloSettings) -> float | None:
    """The burn over the fast page's short window (5 minutes) when it is fast enough to open at
    once (or every waiting request's, for a stuck queue), else None."""
    if burn.stuck:
        return 1.0 / burn.budget
    rate = burn.rates.get(SHORT, math.nan)
    if math.isfinite(rate) and rate >= slos.page_fast_burn and burn.bad.get(SHORT, 0.0) >= MIN_BAD:
        return rate
    return None


class BurnWatch:
    """The ``slo_burn`` events of each cycle: one per node and service burning fast, its onset the
    cycle it was first seen; cleared ones are kept for ``keep_s`` so correlation still sees them."""

    def __init__(self, slos: SloSettings, keep_s: float) -> None:
        self.slos, self.keep = slos, timedelta(seconds=keep_s)
        self._events: dict[Labels, AnomalyEvent] = {}

    def events(self, found: list[Burn], now: datetime) -> list[AnomalyEvent]:
        """This cycle's events, given its burns."""
        fastest: dict[Labels, tuple[float, Burn]] = {}
        for burn in found:
            rate = fast(burn, self.slos)
            if rate is not None and (burn.labels not in fastest or rate > fastest[burn.labels][0]):
                fastest[burn.labels] = (rate, burn)
        for labels, (rate, burn) in fastest.items():
            why = ("its queue has not moved for a minute" if burn.stuck else
                   f"{burn.bad.get(SHORT, 0.0):.0f} bad requests in {SHORT}")
            reason = f"spends the {burn.slo} {burn.sli} budget {rate:.0f}× as fast as allowed ({why})"
            known = self._events.get(labels)
            if known is None or known.cleared_at is not None:
                self._events[labels] = AnomalyEvent(BURN_SIGNAL, "ingress", labels, now, now, None, rate,
                                                    None, rate, reason, BURN_DETECTOR)
            else:
                self._events[labels] = replace(known, value=rate, score=rate, reason=reason)
        for labels, event in list(self._events.items()):
            if labels in fastest:
                continue
            if event.cleared_at is None:
                self._events[labels] = replace(event, cleared_at=now)
            elif now - event.cleared_at > self.keep:
                del self._events[labels]
        return list(self._events.values())
