"""How a diagnosis rule states its verdict: the severity its symptoms raise it to, the impact it
lists, and the common shape of a rule that one anomaly decides (its first event names the root
cause). The rules themselves are in ``analyzer/diagnosis/rules.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from analyzer.detection.events import AnomalyEvent
from analyzer.diagnosis.case import Case, Diagnosis, RootCause, describe
from oximeter.runbook import runbook_ref
from oximeter.vocabulary import SEVERITY_RANK, Severity


def symptom_severity(case: Case) -> Severity:
    """P0 symptoms (504s, a full queue, queue wait p99 over 1 s) make any diagnosis critical."""
    if case.of("error_504_ratio", "queue_limit_ratio"):
        return "critical"
    if any(e.value >= case.limit("queue_wait_p99") for e in case.of("queue_wait_p99")):
        return "critical"
    return "info"


def verdict(case: Case, rule: str, layer: str, cause: RootCause, sentence: str, base: Severity,
            cause_signals: Iterable[str]) -> Diagnosis:
    """The diagnosis, at ``base`` severity or higher when the symptoms say so, linked to its runbook."""
    sev = max(base, symptom_severity(case), key=SEVERITY_RANK.__getitem__)
    return Diagnosis(rule, layer, cause, sentence, sev, runbook_ref(rule), tuple(cause_signals))


def impact_text(case: Case, causes: Iterable[str]) -> str:
    """``; impact: …`` naming up to three of the case's anomalies that are not its cause, or ''."""
    causes = set(causes)
    shown = [describe(e) for e in case.events if e.signal not in causes][:3]
    return f"; impact: {', '.join(shown)}" if shown else ""


def first(case: Case, *signals: str) -> AnomalyEvent | None:
    """The earliest event of any of ``signals``, or None."""
    found = case.of(*signals)
    return found[0] if found else None


def first_names_cause(case: Case, rule: str, layer: str, signals: tuple[str, ...], base: Severity,
                      say: Callable[[AnomalyEvent, RootCause], str], *, impact: bool = True,
                      ) -> Diagnosis | None:
    """A rule that one anomaly decides: the first event of ``signals`` is the root cause, ``say``
    words it (``impact``: followed by the other anomalies), ``signals`` are its cause signals."""
    e = first(case, *signals)
    if e is None:
        return None
    cause = RootCause(e.signal, e.labels)
    sentence = say(e, cause) + (impact_text(case, signals) if impact else "")
    return verdict(case, rule, layer, cause, sentence, base, signals)
