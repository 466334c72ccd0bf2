"""Queries and traffic guards that several catalogue signals share (``analyzer/signals/catalogue.py``):
each written once here, so two signals that read the same requests or the same histogram read them alike.
"""

from __future__ import annotations

from analyzer.signals import query as q
from analyzer.signals.spec import TrafficGuard
from oximeter.xids import xid_pattern

# The p99 signals count detections only where their 5-min window holds at least this many
# observations (ten a minute). Below it a window's p99 is one or two stray requests; at it (as at
# 100) it is still its slowest one, and what makes a detection more than one slow request is its
# persistence: the p99 must stay up for 10 min beyond its window, so slow requests recur through
# 15 min, a few percent of them. A light node (0.3 requests a second at night) is judged too.
P99_MIN_COUNT = 50
# A node's inter-token latency is compared with its peers' by its median: every token of a slower
# card's node is slower, while a long prompt's prefill holds up only the tokens beside it (which move
# a p99 by half, at random, on any node). The median of the tokens of 50 requests in 5 min (the p99s'
# minimum) is steady enough to compare a tenth apart.
PEER_MIN_COUNT = P99_MIN_COUNT


def observations(histogram: str, minimum: float = P99_MIN_COUNT, *, model: bool = False) -> TrafficGuard:
    """At least ``minimum`` observations of ``histogram`` in the 5-min window its p99 spans
    (``model``: vLLM's model_name copied to ``model``, as the signal's own query does)."""
    count: q.Expr = q.increase(f"{histogram}_count", 300)
    return TrafficGuard.of(q.Relabel(count) if model else count, minimum)


def requests_ratio(code: str) -> q.Ratio:
    """The share of requests answered with ``code`` over 1 min."""
    return q.Ratio(q.increase("oximeter_requests_total", 60, {"code": code}, ("code",)), REQUESTS)


def ecc(kind: str, window_s: float) -> q.Increase:
    """ECC errors of ``kind`` over ``window_s``."""
    return q.increase("oximeter_gpu_ecc_errors_total", window_s, {"kind": kind}, ("kind",))


REQUESTS = q.increase("oximeter_requests_total", 60, drop=("code",))
REQUESTS_5M = q.increase("oximeter_requests_total", 300, drop=("code",))
COMPLETIONS = q.increase("oximeter_completions_total", 300, drop=("finish_reason",))
CACHE_REQUESTS = q.increase("oximeter_cache_requests_total", 300, drop=("result",), per_second=True)
PAGING = {"xid": f"~{xid_pattern()}"}
# A clock-event reason other than idle is active (a clock drop with only "idle" is an idle card).
THROTTLED = q.gauge("oximeter_gpu_clock_event_active", {"reason": "!idle"}, drop=("reason",))


# A node's median inter-token latency over 5 min (older vLLM names the histogram
# time_per_output_token: the `or` fallback), counted in requests (one first token each), not tokens:
# a request's tokens stall together.
ITL_P50_RECORD = "node_model:vllm_inter_token_latency_seconds:p50_5m"
ITL_P50 = q.Relabel(q.HistogramQuantile(0.5, q.Or(q.bucket_rate("vllm:inter_token_latency_seconds"),
                                                  q.bucket_rate("vllm:time_per_output_token_seconds"))))
ITL_GUARD = observations("vllm:time_to_first_token_seconds", PEER_MIN_COUNT, model=True)
