"""An incident's severity from the harm it does: the fastest error-budget burn among the SLOs it
harms (``analyzer/diagnosis/burn.py``), never a fixed line alone.

A finding harms the objectives of the requests its nodes served (its services' burns when it names
no node): burning fast enough to page makes it critical, a ticket's burn a warning, and a fast burn
its short window sees before the long ones do (its ``slo_burn`` event, at a fault's onset) a
warning too, so harm opens an incident within a cycle or two. What the rules
say without an SLO (a paging Xid, an ECC storm, a queue wait over a static line) is evidence of a
fault that needs a hand, at most a warning, until users feel it. Each cycle grades again, so an
incident rises as its burn does (the tracker never lowers a severity).

Harmless is quiet: a finding left at info (no objective it harms burns, and no rule saw hardware,
a leak or saturation worth a ticket) opens no incident; it is evidence for one already open, and
the digest's noisiest signals and headroom tell of it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from analyzer.diagnosis.burn import Burn, fastest
from analyzer.diagnosis.case import BURN_SIGNAL
from analyzer.incidents.lifecycle import Finding
from analyzer.signals.slo import SloSettings
from oximeter.vocabulary import SEVERITY_RANK, Severity

# The most a rule's own verdict may say without a burn behind it: a ticket, not a page.
EVIDENCE_CEILING: Severity = "warning"
# A fast burn on the short window alone (``burn_events``), before the long ones agree: harm seen at
# its onset, opened as a ticket and raised to a page when the burn-rate alert's windows say so.
PROVISIONAL: Severity = "warning"


def harmed(found: Sequence[Burn], services: Sequence[str], nodes: Sequence[str]) -> list[Burn]:
    """The burns of the requests ``nodes`` served (of ``services``, where named); without nodes,
    every burn of ``services``."""
    own = [b for b in found if not services or b.service in services]
    if nodes:
        return [b for b in own if b.node in nodes]
    return own


def _ceiling(severity: Severity) -> Severity:
    return min(severity, EVIDENCE_CEILING, key=SEVERITY_RANK.__getitem__)


def graded(found: Sequence[Finding], now: Sequence[Burn], slos: SloSettings) -> list[Finding]:
    """``found`` with each diagnosis' severity the fastest burn (of this cycle's, ``now``) it
    harms, or its rule's (at most a warning) when that is higher."""
    out = []
    for finding in found:
        burn, _ = fastest(harmed(now, finding.services, sorted(finding.group.nodes)), slos)
        burning = any(e.signal == BURN_SIGNAL and e.cleared_at is None for e in finding.group.events)
        if burn == "info" and burning:
            burn = PROVISIONAL
        rule = _ceiling(finding.diagnosis.severity)
        severity = max(burn, rule, key=SEVERITY_RANK.__getitem__)
        if severity != finding.diagnosis.severity:
            finding = replace(finding, diagnosis=replace(finding.diagnosis, severity=severity))
        if severity == "info" and finding.may_open:
            finding = replace(finding, may_open=False)
        out.append(finding)
    return out
