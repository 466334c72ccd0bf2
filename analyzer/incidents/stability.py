"""What keeps an open incident's verdict and its chat stream steady (pure; the tracker applies it).

A root cause changes only for a *stronger* candidate that has held for a dwell time: a rule that
matched beats no rule (a named pattern over a guess: the busy GPUs of a full node are its
capacity problem, not a GPU fault), then a lower layer beats a higher one, then a GPU beats the
node it sits on (the GPU-level cause explains the node-level symptom, also when its own signal
crosses later). Anything
else (a symptom that outlives its cause, two signals of one rule taking turns) keeps the incumbent,
so a root cause cannot alternate.

The message budget: per incident one "opened", at most one root-cause change, at most one
severity change (always upward), and one "resolved" (a re-open is announced and resolves again).
Whatever else happens stays in the incident's timeline and is shown in its next message.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from analyzer.diagnosis.case import Diagnosis, RootCause
from analyzer.incidents.model import Incident
from oximeter.vocabulary import LAYERS

# Changes that may each be announced once per incident; the rest of the budget is open/resolve.
ONCE_PER_INCIDENT = ("root_cause_changed", "severity_up")
# One incident's messages: opened, one root-cause change, one severity change, resolved.
MESSAGE_BUDGET = 4


def specificity(labels: tuple[tuple[str, str], ...]) -> int:
    """1 for a GPU-level entity (its labels name a GPU), 0 for a node- or service-level one."""
    return int(any(k == "gpu" for k, _ in labels))


def strength(rule: str, layer: str, root: RootCause) -> tuple[int, int, int]:
    """How strongly a verdict explains an incident (larger is stronger)."""
    depth = LAYERS.index(layer) if layer in LAYERS else len(LAYERS)
    return int(rule != "unclassified"), -depth, specificity(root.labels)


def _place(root: RootCause) -> tuple[str | None, str | None]:
    labels = dict(root.labels)
    return labels.get("node"), labels.get("gpu")


def same_cause(root: RootCause, rule: str, d: Diagnosis) -> bool:
    """Whether ``d`` blames what ``root`` (under ``rule``) blames: the same root cause, or the same
    rule naming another of its own cause signals on the same place (KV usage or preemptions of one
    engine; queue length or queue wait of one gateway)."""
    if d.root_cause == root:
        return True
    # A candidate naming a GPU of the incumbent's node is more specific, not the same cause.
    (node, gpu), (other_node, other_gpu) = _place(root), _place(d.root_cause)
    same_place = node == other_node and (other_gpu is None or gpu == other_gpu)
    return d.rule == rule and root.signal in d.cause_signals and same_place


def held(incident: Incident) -> Diagnosis:
    """The incident's current verdict as a Diagnosis."""
    return Diagnosis(incident.rule, incident.layer, incident.root_cause, incident.sentence, incident.severity,
                     incident.runbook, tuple(e.signal for e in incident.evidence if e.role == "cause"))


@dataclass(frozen=True)
class Pending:
    """A stronger candidate waiting out its dwell time."""

    diagnosis: Diagnosis
    since: datetime


def choose(incident: Incident, d: Diagnosis, pending: Pending | None, now: datetime,
           dwell: timedelta, *, live: bool = True) -> tuple[Diagnosis, Pending | None]:
    """The verdict an open incident takes this cycle given the new diagnosis ``d``, and the
    candidate still waiting (None when none is); ``live``: whether d's root cause is still
    anomalous (a cleared event does not keep a candidate's dwell going)."""
    current = held(incident)
    new = strength(d.rule, d.layer, d.root_cause)
    old = strength(current.rule, current.layer, current.root_cause)
    if same_cause(current.root_cause, current.rule, d):
        # The same cause: keep the root cause, take the new words and severity under the same rule
        # or a stronger one (a rule matching what was unclassified); a weaker or rival rule is
        # recovery or noise (a cooled GPU no longer "throttled", a draining queue's idle GPUs).
        adopt = d.rule == current.rule or new > old
        return (replace(d, root_cause=current.root_cause) if adopt else current), None
    if new <= old or not live:
        return current, None  # a symptom, or an equal rival: the incumbent stays
    if pending is None or not same_cause(pending.diagnosis.root_cause, pending.diagnosis.rule, d):
        pending = Pending(d, now)
    if now - pending.since < dwell:
        return current, pending
    return replace(d, root_cause=pending.diagnosis.root_cause), None


def announced(incident: Incident, kind: str) -> bool:
    """Whether a ``kind`` change was already told for this incident (so it is folded this time)."""
    return kind in ONCE_PER_INCIDENT and any(t.notified and t.kind == kind for t in incident.timeline)


def message_budget(kinds: Iterable[str]) -> int:
    """The most chat messages an incident may cause, given the kinds of its told changes: the
    budget, plus an announcement and a resolve for each re-open."""
    opened = sum(1 for kind in kinds if kind == "opened")
    return MESSAGE_BUDGET + 2 * max(0, opened - 1)
