"""The rules that compare a node with its same-model peers: a slow card or node
(``peer_outlier``), told apart from the load it took (its share of the requests), the engine's
KV pool or its prefix cache; and a node out-serving its peers before any queue (named as
``capacity_exhausted`` at info)."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from statistics import median

from analyzer.detection.events import AnomalyEvent
from analyzer.diagnosis.case import THROTTLE_REASON, Case, Diagnosis, RootCause, describe
from analyzer.diagnosis.verdicts import first, impact_text, verdict
from analyzer.signals.spec import traffic_name

# A node's median inter-token latency: against its same-model peers, and against its own past.
ITL_SIGNALS = ("engine_itl_peer", "engine_itl_p50")
PEER_SIGNALS = ("gpu_utilization_peer", *ITL_SIGNALS)


def peer_outlier(case: Case) -> Diagnosis | None:
    """One GPU or node much slower than its same-model peers with no throttle reason."""
    # The GPU's own peer signal names the card; the node's latency gap is its symptom, even when
    # the node's signal crossed first.
    # Too few nodes of the model to compare: the node's tokens slower than they used to be, with
    # the card its node-mates wait for standing out among them.
    e = first(case, "gpu_utilization_peer") or first(case, "engine_itl_peer") or first(case, "engine_itl_p50")
    if e is None:
        return None
    card = _slow_card(case, e)
    if card is None and e.signal == "engine_itl_p50":
        return None
    node = e.entity.get("node")
    throttled = any(v >= 1 for (n, _), v in case.per_gpu(THROTTLE_REASON).items() if n == node)
    # A throttle anomaly in the window counts too: a cooling GPU drops its reason before the
    # peer gap (a 5-min median) closes, and that gap is the throttle's, not a slow card's.
    throttled = throttled or any(x.entity.get("node") == node
                                 for x in case.of("gpu_temperature", "gpu_sm_clock_ratio"))
    # Each says the gap is load or another layer's fault rather than a slow card.
    explained = (_node_moved, _busier, _kv_starved, _prefill_bound)
    if throttled or any(explains(case, e) for explains in explained):
        return None
    # Against its peers, or (the node's median inter-token latency) against its own past.
    against = "" if e.signal == "engine_itl_p50" else " of its same-model peers"
    if card is None:
        cause, busier = RootCause(e.signal, e.labels), ""
    else:
        cause, busy, mates = card
        busier = f" busier than its node-mates ({busy * 100:.0f} % against {mates * 100:.0f} %) while"
    return verdict(case, "peer_outlier", "infrastructure", cause,
                   f"{cause.entity}:{busier} {describe(e)}{against}, no throttle reason"
                   + impact_text(case, PEER_SIGNALS), "warning", PEER_SIGNALS)


def _slow_card(case: Case, e: AnomalyEvent) -> tuple[RootCause, float, float] | None:
    """The card a node's latency gap comes from, with its utilisation and its mates' highest: the
    one its node-mates wait for, busier than every one of them by ``slow_card_ratio``. None when
    the gap is a GPU's own already, or no card of the node stands out (the node is named then)."""
    if e.signal not in ITL_SIGNALS:
        return None
    node = e.entity.get("node")
    mine = {labels: v for labels, v in case.context("gpu_utilization_peer").items()
            if dict(labels).get("node") == node and math.isfinite(v)}
    if len(mine) < 2:
        return None
    labels = max(mine, key=lambda k: mine[k])
    busiest = max(v for k, v in mine.items() if k != labels)
    if not mine[labels] > 0 or mine[labels] < busiest * case.thresholds.slow_card_ratio:
        return None
    return RootCause("gpu_utilization_peer", labels), mine[labels], busiest


def _node_moved(case: Case, e: AnomalyEvent) -> bool:
    """Whether a GPU's peer gap is its whole node's: its node-mates are as busy as it is (by less
    than the peer signal's own margin), so the node took more work (load), not one slow card,
    which stands out against the GPUs it runs in step with too."""
    node, gpu = e.entity.get("node", ""), e.entity.get("gpu")
    if gpu is None or e.signal not in case.catalogue:
        return False
    util = case.per_gpu(e.signal)
    mates = [v for (n, g), v in util.items() if n == node and g != gpu]
    if not mates:
        return False
    return util.get((node, gpu), e.value) - median(mates) < case.catalogue[e.signal].min_delta


def _kv_starved(case: Case, e: AnomalyEvent) -> bool:
    """Whether a node's latency gap to its peers is its engine running out of KV blocks: it preempts
    (recomputing sequences slows every token of the batch) or its KV cache is full. That is KV
    pressure on a sound card; a GPU's own peer gap is not explained by it (the whole engine,
    every GPU of it, waits on the same pool)."""
    node = e.entity.get("node")
    if e.signal not in ITL_SIGNALS:
        return False
    if any(x.entity.get("node") == node for x in case.of("preemption_rate")):
        return True
    limit = case.limit("kv_cache_usage")
    return any(dict(k).get("node") == node and v >= limit for k, v in case.context("kv_cache_usage").items())


def _prefill_bound(case: Case, e: AnomalyEvent) -> bool:
    """Whether a node's latency gap to its peers is its prefix cache collapsing: every prompt it no
    longer finds cached is prefilled again, and a prefill holds up every token of the batch it
    joins. That is the engine's cache on a sound card (``prefix_cache_collapse``)."""
    return e.signal in ITL_SIGNALS and any(
        x.entity.get("node") == e.entity.get("node") for x in case.of("prefix_cache_hit_ratio"))


def _busier(case: Case, e: AnomalyEvent) -> bool:
    """Whether a node's peer gap is explained by its traffic: it serves at least as many times
    its peers' requests as its latency is times theirs (load: capacity, scheduling, or nothing).
    Only a peer gap: against its own past, a slower card is told from load by its node-mates."""
    spec = case.catalogue.get(e.signal)
    if spec is None or spec.kind != "peer" or e.baseline is None or e.baseline <= 0:
        return False
    share = _traffic_share(case, e.signal, e.entity)
    return share is not None and share >= e.value / e.baseline


# The peer signal whose traffic guard counts each node's requests (per model, from the engine's own
# histogram, so stock vLLM telemetry has it too): what a node's share of the load is read from.
REQUESTS_OF = "engine_itl_peer"


def took_more(case: Case, entity: Mapping[str, str]) -> bool:
    """Whether ``entity``'s node served at least ``busier_share`` times its peers' median requests."""
    share = _traffic_share(case, REQUESTS_OF, entity)
    return share is not None and share >= case.thresholds.busier_share


def _traffic_share(case: Case, signal: str, entity: Mapping[str, str]) -> float | None:
    """How many times its peers' median requests ``entity``'s node served, from the traffic guard
    of peer ``signal`` (peers: the other nodes sharing its peer labels, e.g. the same model; with
    none of those labels in ``entity``, every other node). None without peers to compare."""
    spec = case.catalogue.get(signal)
    if spec is None:
        return None
    node = entity.get("node")
    peers = [k for k in spec.peer_labels if k in entity]
    mine, others = None, []
    for labels, value in case.snapshot.get(traffic_name(signal), {}).items():
        series = dict(labels)
        if any(series.get(k) != entity.get(k) for k in peers) or not math.isfinite(value):
            continue
        if series.get("node") == node:
            mine = value if mine is None else mine + value
        else:
            others.append(value)
    if mine is None or not others or median(others) <= 0:
        return None
    return mine / median(others)


def nodes_moved(case: Case) -> Iterator[AnomalyEvent]:
    """GPUs busier than their peers with every node-mate as busy: their nodes took more work."""
    return (x for x in case.of("gpu_utilization_peer") if _node_moved(case, x))


def outserving(case: Case) -> Diagnosis | None:
    """No queue yet, but a node serving several times its peers' requests (``busier_share`` at
    least), every GPU of it busier than theirs by no more than that: the balancer sends it more
    than its share and its headroom goes first. Named at info (its latency is still within its
    margins); a card slower at the same traffic is not this (its share is not larger), nor one
    card of the node (``peer_outlier``)."""
    for e in nodes_moved(case):
        if e.baseline is None or e.baseline <= 0:
            continue
        share = _traffic_share(case, REQUESTS_OF, e.entity)
        if share is None or share < max(e.value / e.baseline, case.thresholds.busier_share):
            continue
        node = e.entity.get("node", "")
        cause = RootCause(e.signal, (("node", node),))
        return verdict(case, "capacity_exhausted", "scheduling", cause,
                       f"node={node} serves {share:.1f} × its peers' requests, every GPU of it busier "
                       f"(like {describe(e)}): its headroom goes first; no queue yet", "info", PEER_SIGNALS)
    return None
