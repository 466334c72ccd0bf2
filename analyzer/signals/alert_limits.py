"""Limits that no single signal of the catalogue sets: those of an alert that combines several (the
queue up while the GPUs idle), or draws a line the analyzer does not (a card's memory full, a
cache's hit ratio under a floor where the analyzer judges its drop, the TTFT and request-duration
objectives the static p99 alerts and the overview dashboard hold the fleet to).

Each is named like a signal's limit (``name.field``), so an alert template writes
``[[gpu_memory_full.threshold]]`` and ``oximeter rules build`` fills it in, and a configuration
overrides it under ``analyzer.alert_limits`` (``gpu_memory_full: {threshold: 0.95}``) as
``analyzer.signals`` overrides a signal's.
"""

from __future__ import annotations

from collections.abc import Mapping

from oximeter.errors import ConfigError

ALERT_LIMITS: dict[str, dict[str, float]] = {
    # A queue wait p99 (seconds) under it is healthy: GpuIdleWhileQueueing counts a queue above it as
    # backed up, the overview's queue-wait tile turns orange past it.
    "healthy_queue_wait": {"threshold": 0.2},
    # GpuIdleWhileQueueing: requests queue (the wait p99 above healthy, or more than a few requests
    # waiting) while the node's GPUs are mostly idle (utilisation p95 under 30 %): a scheduling
    # bottleneck, not a lack of capacity.
    "gpu_idle_while_queueing": {"queue_length": 5, "utilization": 0.3},
    # GatewayConcurrencySaturated: in-flight requests at this share of the concurrency limit or more,
    # every slot nearly taken (P0).
    "gateway_concurrency_saturated": {"threshold": 0.95},
    # EngineStreamErrors: more than this share of the streams begun in 5 min failed after their first
    # chunk, with at least min_traffic streams begun.
    "engine_stream_errors": {"threshold": 0.01, "min_traffic": 20},
    # The gateway's time-to-first-token p99 objective (seconds): TtftP99AboveSlo fires at twice it,
    # with at least min_traffic requests in the 5 min its p99 spans (fewer make a p99 of noise); the
    # overview's TTFT tile turns orange at it and red at twice it.
    "ttft_p99_above_slo": {"slo": 1.0, "min_traffic": 20},
    # The end-to-end request duration p99 objective (seconds; a long answer streams for many):
    # RequestP99AboveSla fires at twice it, with at least min_traffic requests in its 5 min.
    "request_p99_above_sla": {"sla": 30.0, "min_traffic": 20},
    # TtftAboveYesterday's floor (seconds): under it a fast service's TTFT doubling is harmless
    # jitter; at least min_traffic requests in its 5 min.
    "ttft_above_yesterday": {"floor": 0.2, "min_traffic": 20},
    # GpuMemoryFull: a card's memory in use at 99 % or more. Engines that preallocate (vLLM, ~90 %)
    # sit below it, so only memory that grows on demand reaches it.
    "gpu_memory_full": {"threshold": 0.99},
    # CacheHitRatioLow: a cache's hit ratio over 5 min under 60 % (a cache that usually hits 95 %
    # and now misses enough to back the queue up).
    "cache_hit_ratio_low": {"threshold": 0.6},
}


def alert_limits(overrides: Mapping[str, Mapping[str, float]] | None = None) -> dict[str, float]:
    """``{"gpu_memory_full.threshold": 0.99, ...}`` with ``overrides`` applied; an override of a
    limit not listed above raises ConfigError naming ``analyzer.alert_limits.<name>.<field>``."""
    out = {f"{name}.{field}": float(number) for name, fields in ALERT_LIMITS.items()
           for field, number in fields.items()}
    problems = []
    for name, fields in (overrides or {}).items():
        for field, number in fields.items():
            key = f"{name}.{field}"
            if key not in out:
                problems.append(f"analyzer.alert_limits.{key}: no such alert limit "
                                f"(known: {', '.join(sorted(out))})")
            else:
                out[key] = float(number)
    if problems:
        raise ConfigError(problems)
    return out
