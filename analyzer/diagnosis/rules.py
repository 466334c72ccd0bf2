"""Root-cause diagnosis: one named function per rule, tried in order, first match wins.

A rule sees a :class:`Case`: the group's anomaly events *and* a snapshot of current values per
entity, because several rules hinge on context that is not itself anomalous ("GPU utilisation
low", "KV cache not full", "a thermal clock reason is active"). Those rules are here; the rules
one anomaly decides by itself (a paging Xid, an ECC counter, a leak's trend, a target down) are
in ``analyzer/diagnosis/single.py``, and how every rule words and grades its verdict in
``analyzer/diagnosis/verdicts.py``. ``RULES`` below is the order they are all tried in.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from statistics import fmean

from analyzer.detection.events import AnomalyEvent
from analyzer.diagnosis.case import (
    ENGINE_PREEMPTED,
    ENGINE_WAITING,
    LOWER_LAYERS,
    THERMAL_REASON,
    Case,
    Diagnosis,
    Labels,
    RootCause,
    describe,
    fmt_value,
)
from analyzer.diagnosis.opening import distinct, opens_incident
from analyzer.diagnosis.peers import (
    ITL_SIGNALS,
    nodes_moved,
    outserving,
    peer_outlier,
    took_more,
)
from analyzer.diagnosis.single import (
    ecc_slow_burn,
    ecc_storm,
    ecc_uncorrectable,
    engine_hung,
    engine_leak,
    gpu_memory_leak,
    ingress_errors,
    node_not_ready,
    nvlink_degraded,
    queue_undrained,
    telemetry_lost,
    xid_critical,
)
from analyzer.diagnosis.verdicts import first, first_names_cause, impact_text, verdict
from analyzer.signals.spec import traffic_name
from oximeter.vocabulary import LAYERS, Severity

QUEUE_UP = ("queue_wait_p99", "queue_length", "queue_limit_ratio")
LATENCY_UP = ("queue_wait_p99", "ttft_p99", "request_p99", "engine_ttft_p99", *ITL_SIGNALS)
TTFT_UP = ("ttft_p99", "engine_ttft_p99")


def thermal_throttle(case: Case) -> Diagnosis | None:
    """Latency up, a GPU past its temperature limit (``gpu_temperature``'s threshold, 85 °C as
    shipped) with a thermal clock reason active.

    Whatever the clock ratio: the thermal reason says the clock is held down for heat, and a
    mild throttle (SM clock at 80 %) is still a throttle. Utilisation is deliberately not
    consulted: a throttled GPU often looks idle-ish. Where the inputs have no clock reasons
    (dcgm-exporter's default counters leave them out), the temperature past its limit is the
    evidence and the sentence says the reason could not be read.
    """
    latency = case.of(*LATENCY_UP)
    throttle = case.of("gpu_temperature", "gpu_sm_clock_ratio")
    # The throttle's own anomaly also qualifies: at low traffic the latency rise can stay under
    # its detector's margin while the GPU is plainly cooking.
    if not latency and not throttle:
        return None
    limit = case.limit("gpu_temperature")
    temps, clocks, thermal = case.per_gpu("gpu_temperature"), case.per_gpu("gpu_sm_clock_ratio"), \
        case.per_gpu(THERMAL_REASON)
    reasons_read = THERMAL_REASON not in case.unreadable
    hot = sorted(g for g, temp in temps.items()
                 if temp > limit and (thermal.get(g, 0.0) >= 1 or not reasons_read))
    if not hot:
        return None
    node, gpu = hot[0]
    clock = clocks.get(hot[0])
    # The series' own labels (uuid, model, ...), so the root cause is the same one the
    # gpu_temperature event names and does not "change" when the rule starts to match.
    labels = next((k for k in case.context("gpu_temperature")
                   if (dict(k).get("node"), dict(k).get("gpu")) == (node, gpu)),
                  (("gpu", gpu), ("node", node)))
    cause = RootCause("gpu_temperature", labels)
    return verdict(case, "thermal_throttle", "infrastructure", cause,
                    f"GPU {cause.entity} at {temps[hot[0]]:.0f} °C, "
                    + (f"SM clock {clock * 100:.0f} % of max " if clock is not None else "")
                    + ("with a thermal reason" if reasons_read
                       else "past its limit (clock reasons not exported)")
                    + (f", while {describe(latency[0])}" if latency else ""), "warning",
                    ["gpu_temperature", "gpu_sm_clock_ratio"])


RESTART_SIGNALS = ("container_restarts", "pod_not_ready")
# Each restart signal's words, in the order they name the cause: an OOM kill says why the
# container restarted, a loop in 5 min or in 15 min how often, not Ready how long it was out.
_RESTARTS = {"container_oom_killed": "OOM-killed at its container's memory limit and restarted",
             "container_restarts": "restarted {value:.0f} times in 5 min: a restart loop",
             "restart_loop": "restarted {value:.0f} times in 15 min: a crash loop",
             "pod_not_ready": "not Ready for 10 min"}


def restart_loop(case: Case) -> Diagnosis | None:
    """An engine's pod restarting again and again, killed at its memory limit, or kept out of
    service: the platform layer, whatever the engine's own series show while it is down (they are
    its impact)."""
    e = next(filter(None, (first(case, signal) for signal in _RESTARTS)), None)
    if e is None:
        return None
    cause = RootCause(e.signal, e.labels)
    pod = f"{e.entity.get('namespace', '?')}/{e.entity.get('pod', '?')} on {e.entity.get('node', '?')}"
    causes = [s for s in _RESTARTS if s in RESTART_SIGNALS or case.of(s)]
    what = _RESTARTS[e.signal].format(value=e.value)
    return verdict(case, "restart_loop", "platform", cause, f"pod {pod} {what}" + impact_text(case, causes),
                   "warning", causes)


def dependency_degraded(case: Case) -> Diagnosis | None:
    """Dependency latency up and/or cache hit rate down; queue and GPU idling are impact."""
    deps = case.of("dependency_latency_p99", "cache_hit_ratio")
    if not deps:
        return None
    e = deps[0]
    causes = ["dependency_latency_p99", "cache_hit_ratio"]
    parts = ", ".join(describe(d) for d in deps[:2])
    util = case.context("gpu_utilization_p95")
    util_text = f", GPU util {fmean(util.values()) * 100:.0f} %" if util else ""
    return verdict(case, "dependency_degraded", "dependency", RootCause(e.signal, e.labels),
                    f"{parts}{util_text}" + impact_text(case, causes), "warning", causes)


def kv_pressure(case: Case) -> Diagnosis | None:
    """Preemptions rising, or queue wait up with KV-cache usage ≥ 0.95.

    Rising preemptions need no queue beside them: the engine preempts a sequence only when its KV
    blocks run out, so they are KV pressure by themselves, and with bursty traffic the pool can fill
    and preempt in bursts too short to build a gateway queue or to show in a sampled usage gauge.
    A full cache alone is not: vLLM fills its pool under any steady load.

    Requests held up in the engine while it preempts (at any rate, under the rising preemptions'
    threshold too, now or in the last 15 minutes) wait for KV blocks, not for a batch slot: with
    the engine's queue seen, or its own TTFT up, TTFT up is that wait, as it is for
    ``capacity_exhausted``, and the pool is the cause.

    An engine whose pool is far smaller than its same-model peers' (``kv_pool_peer``) is KV pressure
    waiting for load, at any traffic: the cause by itself, and named beside the other evidence.
    """
    waiting = max(case.context(ENGINE_WAITING).values(), default=0.0)
    # Requests held up inside the engine: in its waiting queue, or its own TTFT up.
    held = waiting > 0 or bool(case.of("engine_ttft_p99"))
    queue = case.of(*QUEUE_UP) or (case.of(*TTFT_UP) if held else [])
    preempt = case.of("preemption_rate")
    small = case.of("kv_pool_peer")
    pool = _pool_text(small[0]) if small else ""
    if not queue and not preempt:
        if not small:
            return None
        return verdict(case, "kv_pressure", "engine", RootCause(small[0].signal, small[0].labels),
                       f"KV-cache pool {pool}: it runs out of blocks before its peers as load rises"
                       + impact_text(case, ["kv_pool_peer"]), "warning", ["kv_pool_peer"])
    kv = {k: v for k, v in case.context("kv_cache_usage").items() if v >= case.limit("kv_cache_usage")}
    evicting = {k: v for k, v in case.context("preemption_rate").items() if v > 0} if held else {}
    if kv:
        labels = sorted(kv)[0]
        cause, text = RootCause("kv_cache_usage", labels), f"KV cache {kv[labels] * 100:.0f} % full"
    elif preempt:
        cause, text = RootCause("preemption_rate", preempt[0].labels), f"preemptions {preempt[0].value:.2g}/s"
    elif evicting:
        labels = sorted(evicting)[0]
        cause = RootCause("preemption_rate", labels)
        text = (f"its engine held requests waiting and preempted {evicting[labels]:.2g}/s" if waiting > 0
                else f"its engine's own TTFT rose as it preempted {evicting[labels]:.2g}/s")
    elif held and (evicted := _preempted_lately(case)):
        labels = sorted(evicted)[0]
        cause = RootCause("preemption_rate", labels)
        text = (f"its engine {'held requests waiting and ' if waiting > 0 else ''}preempted "
                f"{evicted[labels]:.0f} sequence(s) in the last 15 min")
    elif small:
        cause, text = RootCause(small[0].signal, small[0].labels), f"its KV-cache pool is {pool}"
    else:
        return None
    if small and cause.signal != "kv_pool_peer":
        text += f" (its KV-cache pool {pool})"
    causes = ["kv_cache_usage", "preemption_rate", *(["kv_pool_peer"] if small else [])]
    sentence = f"{describe(queue[0])} while {text}" if queue else \
        f"{describe(preempt[0])}: KV cache exhausted" + impact_text(case, causes)
    return verdict(case, "kv_pressure", "engine", cause, sentence, "warning", causes)


def _pool_text(event: AnomalyEvent) -> str:
    """``2772 blocks, 10 % of its same-model peers' 27720`` (the peer median is the baseline)."""
    peers = event.baseline
    share = f", {event.value / peers * 100:.0f} % of its same-model peers' {peers:.0f}" \
        if peers is not None and math.isfinite(peers) and peers > 0 else ""
    return f"{event.value:.0f} blocks{share}"


def _preempted_lately(case: Case) -> dict[Labels, float]:
    """Sequences each node's engine preempted in the last 15 min, where that is the pool's doing:
    not on a node that took more than its share of requests (an engine running more sequences than
    usual preempts too, which is load)."""
    return {k: v for k, v in case.context(ENGINE_PREEMPTED).items()
            if v >= 1 and not took_more(case, dict(k))}


def _unjudged(case: Case, node: str | None, signals: Iterable[str]) -> str | None:
    """Why none of ``signals`` can be judged on ``node`` right now (each one's window holds fewer
    observations than its minimum-traffic guard asks), or None when one can or nothing says."""
    why = None
    for signal in signals:
        spec = case.catalogue.get(signal)
        if spec is None or spec.min_traffic is None:
            return None
        seen = [v for labels, v in case.snapshot.get(traffic_name(signal), {}).items()
                if dict(labels).get("node") == node and math.isfinite(v)]
        if not seen:
            continue
        if max(seen) >= spec.min_traffic.minimum:
            return None
        window = spec.min_traffic.window_s
        span = "window" if window is None else f"{window / 60:.0f}-min window"
        why = why or (f"{signal} not judged: {max(seen):.0f} requests in its {span}, "
                      f"fewer than the {spec.min_traffic.minimum:.0f} it needs")
    return why


def prefix_cache_collapse(case: Case) -> Diagnosis | None:
    """Prefix-cache hit ratio dropping sharply while TTFT rises, or while the node's inter-token
    latency leaves its peers' (the prompts prefilled again hold up every decode step).

    Without that, the drop is named on its own, as information: the engine is doing the prefill
    work again, which the next busy hour will feel, but nothing yet says that requests suffer (the
    node too lightly loaded for its TTFT to be judged, or its TTFT still within its margin).
    """
    e = first(case, "prefix_cache_hit_ratio")
    if e is None:
        return None
    node = e.entity.get("node")
    ttft = case.of(*TTFT_UP) or [x for x in case.of("engine_itl_peer") if x.entity.get("node") == node]
    if ttft:
        return first_names_cause(case, "prefix_cache_collapse", "engine", ("prefix_cache_hit_ratio",),
                                 "warning", lambda e, _: f"{describe(e)} while {describe(ttft[0])}",
                                 impact=False)
    why = _unjudged(case, node, TTFT_UP) \
        or "TTFT not past its margin: the engine absorbs the extra prefill at this load"
    return first_names_cause(case, "prefix_cache_collapse", "engine", ("prefix_cache_hit_ratio",), "info",
                             lambda e, _: f"{describe(e)}; {why}", impact=False)


def empty_outputs(case: Case) -> Diagnosis | None:
    """The engine completing answers with no text, more than its limit's share of them (5 % as
    shipped). The engine is up and fast, so nothing else looks wrong: a broken chat template, a bad
    adapter or sampling that stops at once; the gateway only counted what the engine produced."""
    e = next((x for x in case.of("empty_output_ratio") if x.value > case.limit("empty_output_ratio")), None)
    if e is None:
        return None
    cause = RootCause(e.signal, e.labels)
    return verdict(case, "empty_outputs", "engine", cause,
                    f"{fmt_value(e.signal, e.value)} of the answers on {cause.entity} were empty: the engine "
                    "answers with nothing (template, adapter or model)" + impact_text(case, [e.signal]),
                    "warning", [e.signal])


def _queue_wait(case: Case) -> AnomalyEvent | None:
    """The queue's evidence: its wait, else its length. On a node too lightly loaded for its
    queue-wait p99 to be judged, the requests its gateway turned away with 429 (the queue full, or
    the wait it foresaw too long) are the queue seen from outside."""
    found = first(case, "queue_wait_p99") or first(case, *QUEUE_UP)
    if found is not None:
        return found
    rejected = first(case, "rejected_429_ratio")
    if rejected is not None and _unjudged(case, rejected.entity.get("node"), ("queue_wait_p99",)):
        return rejected
    return None


def capacity_exhausted(case: Case) -> Diagnosis | None:
    """Queue wait up while the engines are full: GPU utilisation high (> 85 %), an engine holding
    requests in its own waiting queue (no batch slot or KV blocks free), the engine's own time to
    first token up with it, or the queue's node working harder than its peers on every GPU (it
    took more traffic than it serves). Nothing is broken; the fleet is simply too small.

    Any suffices: sustained load shows in utilisation, while bursts of a few seconds fill the
    engine between 1-minute utilisation samples that look ordinary; behind a gateway that admits
    only as many requests as it runs, the engine's queue stays empty and the full engine shows as
    its own TTFT rising (its requests wait for each other's prefill). An admission bottleneck
    never fills the engine: its queue stays empty and its TTFT at its baseline. With the engine
    seen full, TTFT up is the wait too (the engine's queue time is part of it), and it rises
    minutes before the queue-wait p99 has held long enough to be an event.
    """
    util = case.context("gpu_utilization_p95")
    busy = fmean(util.values()) if util else None
    waiting = max(case.context(ENGINE_WAITING).values(), default=0.0)
    full = waiting >= case.thresholds.engine_full_waiting
    slowed = first(case, "engine_ttft_p99")
    # The gateway's TTFT (what clients feel) before the engine's own; a slower engine alone (its
    # TTFT up, the gateway's not) is no queue.
    q = _queue_wait(case) or (first(case, "ttft_p99") if full or slowed else None) \
        or (first(case, *TTFT_UP) if full else None)
    if q is None:
        return outserving(case)
    util_text = "" if busy is None else f"GPU util {busy * 100:.0f} %"
    aside = f" ({util_text})" if util_text else ""
    # Behind the gateway's admission limit a busier node queues at the gateway without filling its
    # engine; its GPUs, all well above their peers', are the load it took.
    loaded = next((x for x in nodes_moved(case) if x.entity.get("node") == q.entity.get("node")), None)
    if busy is not None and busy > case.thresholds.gpu_util_high:
        why = util_text
    elif full:
        why = f"its engine held up to {waiting:.0f} requests waiting for a batch slot{aside}"
    elif slowed is not None:
        why = f"its engine's own {describe(slowed)}{aside}"
    elif loaded is not None:
        why = f"its GPUs all busier than their peers (like {describe(loaded)})"
    else:
        return None
    causes = [*QUEUE_UP, *TTFT_UP] if full or slowed or loaded else list(QUEUE_UP)
    return verdict(case, "capacity_exhausted", "scheduling", RootCause(q.signal, q.labels),
                    f"{describe(q)} while {why}: capacity exhausted", "warning", causes)


def scheduling_bottleneck(case: Case) -> Diagnosis | None:
    """Queue wait up, GPUs idle-ish, KV not full, nothing wrong below: requests wait on something else."""
    q, util = _queue_wait(case), case.context("gpu_utilization_p95")
    if q is None or not util or fmean(util.values()) >= case.thresholds.gpu_util_low:
        return None
    if any(e.layer in LOWER_LAYERS for e in case.events):
        return None
    if any(v >= case.limit("kv_cache_usage") for v in case.context("kv_cache_usage").values()):
        return None
    return verdict(case, "scheduling_bottleneck", "scheduling", RootCause(q.signal, q.labels),
                    f"{describe(q)} while GPU util {fmean(util.values()) * 100:.0f} %", "warning",
                    list(QUEUE_UP))


# Rules whose cause is the service's, not one replica's: the load balancer spreads a service's
# traffic over all its nodes, so one shortage of the fleet shows on each of them at about the same
# time. Their findings on nodes of one service are one incident (analyzer.incidents.lifecycle).
SERVICE_WIDE_RULES = frozenset({"capacity_exhausted"})

Rule = Callable[[Case], Diagnosis | None]
RULES: tuple[Rule, ...] = (
    xid_critical, ecc_uncorrectable, ecc_storm, ecc_slow_burn, nvlink_degraded, thermal_throttle,
    peer_outlier, node_not_ready, restart_loop, telemetry_lost, dependency_degraded, engine_leak,
    gpu_memory_leak, engine_hung, kv_pressure, prefix_cache_collapse, empty_outputs, capacity_exhausted,
    scheduling_bottleneck, queue_undrained, ingress_errors,
)
RULE_IDS: tuple[str, ...] = (*(r.__name__ for r in RULES), "unclassified")


def unclassified(case: Case) -> Diagnosis:
    """No pattern matched: the lowest layer, then the earliest onset, is the likeliest cause."""
    # Ties (same layer, same onset) go to the catalogue's order, which lists causes before
    # consequences (temperature before clock), so the root does not flip as evidence arrives.
    order = {name: i for i, name in enumerate(case.catalogue)}
    # Context-only symptoms (end-to-end p99) are impact, never the root cause, when anything else is there.
    # So are anomalies at about their baseline (``distinct``).
    candidates = [x for x in case.events if opens_incident(x.signal, case.catalogue) and distinct(x)] \
        or [x for x in case.events if distinct(x)] or list(case.events)
    e = min(candidates, key=lambda x: (LAYERS.index(x.layer) if x.layer in LAYERS else 99,
                                        x.onset, order.get(x.signal, len(order)), x.signal))
    sev: Severity = "warning" if len(case.events) > 1 else "info"
    return verdict(case, "unclassified", e.layer, RootCause(e.signal, e.labels),
                    f"{describe(e)} on {RootCause(e.signal, e.labels).entity}, earliest lowest-layer anomaly"
                    + impact_text(case, [e.signal]), sev, [e.signal])


def diagnose(case: Case, rules: Iterable[Rule] = RULES) -> Diagnosis:
    """The first rule that matches, else :func:`unclassified`."""
    if not case.events:
        raise ValueError("diagnose needs at least one event")
    for rule in rules:
        verdict = rule(case)
        if verdict is not None:
            return verdict
    return unclassified(case)
