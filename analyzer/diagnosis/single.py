"""The diagnosis rules one anomaly decides: its first event names the root cause, and the rule
words it (``analyzer.diagnosis.verdicts.first_names_cause``). A hardware counter, a trend or a platform
state says what is wrong by itself; the rules that weigh context are in ``analyzer/diagnosis/rules.py``,
which also holds the order all rules are tried in.
"""

from __future__ import annotations

import math

from analyzer.detection.events import AnomalyEvent
from analyzer.diagnosis.case import LOWER_LAYERS, Case, Diagnosis, RootCause, describe, fmt_value
from analyzer.diagnosis.verdicts import first, first_names_cause


def xid_critical(case: Case) -> Diagnosis | None:
    """A paging Xid: isolate the GPU now."""
    # Xid 48 is the driver reporting a double-bit ECC error: with the uncorrectable ECC counter
    # rising on the same GPU, the ECC error is the cause and ecc_uncorrectable names it.
    e = first(case, "xid_paging")
    gpu = None if e is None else (e.entity.get("node"), e.entity.get("gpu"))
    if any((x.entity.get("node"), x.entity.get("gpu")) == gpu for x in case.of("ecc_uncorrected_increase")):
        return None
    return first_names_cause(case, "xid_critical", "infrastructure", ("xid_paging",), "critical",
                             lambda e, cause: f"paging Xid {e.entity.get('xid', '?')} on {cause.entity}: "
                             "isolate the GPU")


def ecc_uncorrectable(case: Case) -> Diagnosis | None:
    """Any uncorrectable ECC error: isolate the GPU now."""
    return first_names_cause(case, "ecc_uncorrectable", "infrastructure", ("ecc_uncorrected_increase",),
                             "critical", lambda e, cause: f"{e.value:.0f} uncorrectable ECC error(s) on "
                             f"{cause.entity}: isolate the GPU")


def ecc_storm(case: Case) -> Diagnosis | None:
    """Corrected ECC +100 in 5 min or × 100 its baseline: drain the node."""
    return first_names_cause(case, "ecc_storm", "infrastructure", ("ecc_corrected_increase",), "critical",
                             lambda e, cause: f"corrected ECC +{e.value:.0f} in 5 min on {cause.entity}"
                             f"{_baseline(e)}: drain the node")


def _baseline(e: AnomalyEvent) -> str:
    return f" (baseline {e.baseline:.2g})" if e.baseline is not None else ""


def ecc_slow_burn(case: Case) -> Diagnosis | None:
    """Corrected ECC errors burning steadily for an hour or more, under every 5-min criterion:
    the memory is wearing out but still correcting, so plan a drain rather than page."""
    return first_names_cause(case, "ecc_slow_burn", "infrastructure", ("ecc_corrected_burn",), "warning",
                             lambda e, cause: f"corrected ECC +{e.value:.0f} in 1 h on {cause.entity} "
                             f"({e.value / 60:.1f} a minute): schedule a drain")


def nvlink_degraded(case: Case) -> Diagnosis | None:
    """One NVLink counting data-link errors (CRC, replays, recoveries): the link is failing.

    Infrastructure, though its symptom is the engine's: a tensor-parallel engine's all-reduce
    crosses every link of its GPUs, so one link replaying its traffic slows every step and looks
    like an engine problem. The message names the link, which is what gets reseated or replaced.
    """
    def say(e: AnomalyEvent, cause: RootCause) -> str:
        link, gpu, node = (e.entity.get(k, "?") for k in ("link", "gpu", "node"))
        return (f"NVLink {link} of GPU {gpu} on {node}: +{e.value:.0f} data-link errors (CRC, replay, "
                f"recovery) in 5 min{_baseline(e)}: drain the node and reseat or replace the link")

    return first_names_cause(case, "nvlink_degraded", "infrastructure", ("nvlink_errors_increase",),
                             "warning", say)


def telemetry_lost(case: Case) -> Diagnosis | None:
    """A scrape target down or a GPU's series vanished (GPUs that detach often show nothing else)."""
    return first_names_cause(
        case, "telemetry_lost", "platform", ("target_down", "gpu_series_vanished", "gpu_down"), "warning",
        lambda e, cause: f"{'scrape target down' if e.signal == 'target_down' else 'GPU telemetry lost'} "
        f"on {cause.entity} since {e.onset:%H:%M} UTC")


def node_not_ready(case: Case) -> Diagnosis | None:
    """Kubernetes says a node is not Ready: its engines are down or being moved, and whatever its
    exporters stopped saying follows from it."""
    return first_names_cause(case, "node_not_ready", "platform", ("node_not_ready",), "critical",
                             lambda e, cause: f"node {e.entity.get('node', '?')} not Ready in Kubernetes: "
                             "its pods are down or being rescheduled")


def full_in(event: AnomalyEvent) -> str:
    """``, full in 1.3 h`` (minutes under an hour, days beyond two) for an event with a time to
    full, else ''."""
    ttf = event.time_to_full_s
    if ttf is None or not math.isfinite(ttf):
        return ""
    if ttf < 3600:
        return f", full in {ttf / 60:.0f} min"
    return f", full in {ttf / 3600:.1f} h" if ttf < 2 * 86400 else f", full in {ttf / 86400:.1f} d"


def engine_leak(case: Case) -> Diagnosis | None:
    """Process RSS rising steadily, with the time until it fills the host's memory."""
    # The score is the rise per hour relative to the level.
    return first_names_cause(case, "engine_leak", "engine", ("process_rss_trend",), "warning",
                             lambda e, cause: f"{cause.entity}: RSS {fmt_value(e.signal, e.value)} of the "
                             f"host's memory, rising {e.score * 100:.1f} % per hour{full_in(e)}",
                             impact=False)


def gpu_memory_leak(case: Case) -> Diagnosis | None:
    """GPU memory in use rising steadily on one card, with the time until it is full.

    The engine layer, not infrastructure: the memory is the engine process's own allocations
    (vLLM preallocates its share and should then hold it flat), the card is healthy, and the
    remedy is restarting or fixing the engine before its next allocation fails out of memory,
    not draining the node.
    """
    # The score is the rise per hour relative to the level.
    return first_names_cause(case, "gpu_memory_leak", "engine", ("gpu_memory_trend",), "warning",
                             lambda e, cause: f"{cause.entity}: GPU memory {fmt_value(e.signal, e.value)} "
                             f"used, rising {e.score * e.value * 100:.1f} points per hour{full_in(e)}")


STALLED_SIGNALS = ("engine_stalled", "upstream_stalled")


def engine_hung(case: Case) -> Diagnosis | None:
    """An engine up but not serving: it holds requests and generated no token for a minute (vLLM's
    own counters, or the gateway's: requests in flight, no answer delivered). Its health check still
    answers, so nothing else names it; what the gateway sees next (its slots held, its queue full,
    429s, first-byte and idle-stream 504s, queue wait and TTFT up) is its impact, whichever of them
    crossed its line first."""
    def say(e: AnomalyEvent, cause: RootCause) -> str:
        held = "running in it" if e.signal == "engine_stalled" else "in flight to it"
        made = "generated no token" if e.signal == "engine_stalled" else "sent nothing back"
        model = f" ({e.entity['model']})" if "model" in e.entity else ""
        return (f"{e.entity.get('node', cause.entity)}'s engine{model} holds {e.value:.0f} request(s) {held} "
                f"and {made} for a minute: up but not serving (hung)")

    return first_names_cause(case, "engine_hung", "engine", STALLED_SIGNALS, "warning", say)


def queue_undrained(case: Case) -> Diagnosis | None:
    """An external work queue (a Redis list or stream) growing, never emptied, with nothing wrong
    below the scheduling layer: its producers outpace the workers that drain it into the gateway,
    which are too few or stuck. With a lower layer at fault, that fault is the cause and the
    queue its impact."""
    if any(x.layer in LOWER_LAYERS for x in case.events):
        return None
    return first_names_cause(case, "queue_undrained", "scheduling", ("external_queue_growth",), "warning",
                             lambda e, _: f"queue {e.entity.get('queue', '?')} on "
                             f"{e.entity.get('node', '?')} grows by {e.value:.2f} items a second and never "
                             "empties: its workers do not keep up")


def ingress_errors(case: Case) -> Diagnosis | None:
    """504 ratio up while the queue and everything upstream are healthy."""
    if any(x.layer != "ingress" for x in case.events):
        return None
    return first_names_cause(case, "ingress_errors", "ingress", ("error_504_ratio",), "critical",
                             lambda e, _: f"{describe(e)} with a healthy queue and upstream", impact=False)
