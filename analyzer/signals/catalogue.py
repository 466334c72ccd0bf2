"""The named signal catalogue: what to query, which layer it speaks for, and how to judge it.

Each signal's query is written here once, as an expression (``analyzer/signals/query.py``) that renders its
PromQL and replays on frames. A signal that names a recording rule (``level:metric:operation``) has
it generated into ``alert_rules/signals.rules.yml`` (``oximeter rules build``) and prefers it; the
PromQL itself is the fallback for stores without a rule engine. Thresholds default to the alerting
rules' values; the config's ``analyzer.signals`` overrides fields of a known signal or adds new
ones, and the diagnosis rules read their limits from the result.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from analyzer.signals import query as q
from analyzer.signals.label_value import LabelValue
from analyzer.signals.shared_queries import (
    CACHE_REQUESTS,
    COMPLETIONS,
    ITL_GUARD,
    ITL_P50,
    ITL_P50_RECORD,
    PAGING,
    REQUESTS,
    REQUESTS_5M,
    THROTTLED,
    ecc,
    observations,
    requests_ratio,
)
from analyzer.signals.sources.vllm_info import KV_POOL_INFO
from analyzer.signals.spec import SignalSpec, TrafficGuard
from analyzer.signals.stalled import Stalled
from oximeter.errors import ConfigError


def _s(**fields: Any) -> SignalSpec:
    expr = fields.pop("expr", None)
    return SignalSpec(**fields) if expr is None else SignalSpec.of(expr, **fields)


# Default thresholds (the alerting rules' values) and each signal's layer.
CATALOGUE: dict[str, SignalSpec] = {s.name: s for s in (
    _s(name="queue_wait_p99", layer="scheduling", kind="latency", unit="s",
       record="service_node:oximeter_queue_wait_seconds:p99_5m",
       expr=q.p99("oximeter_queue_wait_seconds"),
       entity_labels=("service", "node"), threshold=1.0, ratio=1.5, min_delta=0.2, for_s=600, clear_s=300,
       min_traffic=observations("oximeter_queue_wait_seconds"),
       # for_s 600: the p99's own 5-min window holds one burst for 5 min, so "for 5 min" is
       # counted beyond it (window and for stacked on purpose, said here).
       description="queue_wait p99 > 1 s (P0) or > 1.5 × its baseline, held 5 min beyond its "
                   "5-min window; healthy < 200 ms"),
    _s(name="queue_length", layer="scheduling", kind="gauge", unit="requests",
       record="service_node:oximeter_queue_length:max_1m",
       # max_over_time so a burst between two scrapes of the 1m window still counts.
       expr=q.Aggregate(q.OverTime(q.select("oximeter_queue_length"), 60)),
       entity_labels=("service", "node"), threshold=20, for_s=60,
       description="queue length > 20 for 1 min"),
    _s(name="queue_limit_ratio", layer="scheduling", kind="ratio",
       record="service_node:oximeter_queue_length:ratio_limit",
       expr=q.Ratio(q.gauge("oximeter_queue_length"), q.gauge("oximeter_queue_limit")),
       entity_labels=("service", "node"), threshold=0.9, for_s=60,
       description="queue length at ≥ 90 % of its limit (P0)"),
    # Work waiting outside the gateway (a Redis list or stream the exporter reads, fed by
    # producers, drained by workers that call the gateway): growing means nobody drains it fast
    # enough. A busy queue its workers drain touches bottom now and then; one nobody drains never
    # does, so the growth counts only while the queue held 60 items or more (what 0.1 a second
    # adds in its 10 min) all through the last 5 min.
    _s(name="external_queue_growth", layer="scheduling", kind="gauge", unit="1/s",
       record="node_queue:oximeter_external_queue_length:deriv10m",
       expr=q.Aggregate(q.Deriv(q.select("oximeter_external_queue_length"), 600)),
       entity_labels=("node", "queue"), threshold=0.1, for_s=300,
       min_traffic=TrafficGuard.of(q.Aggregate(q.OverTime(q.select("oximeter_external_queue_length"),
                                                          300, q=0.0)), 60),
       description="an external work queue growing by more than 0.1 items a second over 10 min, "
                   "never under 60 items in the last 5 min (nobody drains it)"),
    _s(name="rejected_429_ratio", layer="scheduling", kind="ratio",
       record="service_node_route:oximeter_requests_429:ratio_1m",
       expr=requests_ratio("429"),
       entity_labels=("service", "node", "route"), threshold=0.05, for_s=60,
       min_traffic=TrafficGuard.of(REQUESTS, 20), widen_s=600,
       description="more than 5 % of requests rejected with 429 (over 1 min with at least 20 requests; "
                   "on a lighter node, over the last minutes that hold 20, up to 10)"),
    _s(name="ttft_p99", layer="scheduling", kind="latency", unit="s",
       record="service_node:oximeter_time_to_first_token_seconds:p99_5m",
       expr=q.p99("oximeter_time_to_first_token_seconds"),
       entity_labels=("service", "node"), ratio=1.5, min_delta=0.1, for_s=600, clear_s=300,
       min_traffic=observations("oximeter_time_to_first_token_seconds"),
       description="gateway TTFT p99 > 1.5 × same time yesterday for 5 min beyond its 5-min window "
                   "(SLO × 2 via threshold)"),
    _s(name="request_p99", layer="ingress", kind="latency", unit="s",
       record="service_node_route:oximeter_request_duration_seconds:p99_5m",
       expr=q.p99("oximeter_request_duration_seconds"),
       entity_labels=("service", "node", "route"), ratio=1.5, min_delta=0.5, for_s=300,
       min_traffic=observations("oximeter_request_duration_seconds"),
       # End-to-end latency follows output length (a few long answers move a 5-min p99 by
       # seconds at 1 req/s): context and impact, not an SLO, so it never opens an incident.
       opens_incident=False,
       description="request P99 > 1.5 × same time yesterday for 5 min (context, not an SLO: "
                   "impact only, opens no incident)"),
    _s(name="error_504_ratio", layer="ingress", kind="ratio",
       record="service_node_route:oximeter_requests_504:ratio_1m",
       expr=requests_ratio("504"),
       entity_labels=("service", "node", "route"), threshold=0.01, for_s=60,
       min_traffic=TrafficGuard.of(REQUESTS, 20), widen_s=600,
       description="504 ratio over 1 min > 1 % with at least 20 requests (P0); on a lighter node, over "
                   "the last minutes that hold 20, up to 10"),
    # Requests the same client sent again within seconds (gateway/retries.py says how a retry is
    # recognised): clients re-sending after timeouts or 429s multiply the load they react to.
    _s(name="retry_ratio", layer="ingress", kind="ratio",
       record="service_node_route:oximeter_requests_retried:ratio_5m",
       expr=q.Ratio(q.increase("oximeter_retried_requests_total", 300), REQUESTS_5M),
       entity_labels=("service", "node", "route"), threshold=0.1, for_s=120,
       min_traffic=TrafficGuard.of(REQUESTS_5M, 20),
       description="a retry storm: more than 10 % of requests over 5 min re-sent by their client "
                   "within seconds, with at least 20 requests"),
    _s(name="gpu_temperature", layer="infrastructure", kind="gauge", unit="°C",
       expr=q.gauge("oximeter_gpu_temperature_celsius"),
       entity_labels=("node", "gpu"), threshold=85, for_s=60,
       description="temperature > 85 °C for 1 min"),
    _s(name="gpu_sm_clock_ratio", layer="infrastructure", kind="ratio", direction="down",
       record="node_gpu:oximeter_gpu_sm_clock:ratio_max",
       expr=q.Ratio(q.gauge("oximeter_gpu_sm_clock_hertz"), q.gauge("oximeter_gpu_sm_clock_max_hertz")),
       entity_labels=("node", "gpu"), threshold=0.7, for_s=60,
       # Idle cards clock down with only the "idle" reason: a clock drop counts as throttling
       # only while some other clock-event reason is active.
       min_traffic=TrafficGuard.of(THROTTLED, 1),
       description="SM clock well below its maximum with a throttle reason other than idle"),
    _s(name="gpu_utilization_p95", layer="infrastructure", kind="gauge",
       record="node_gpu:oximeter_gpu_utilization_ratio:p95_5m",
       expr=q.Aggregate(q.OverTime(q.select("oximeter_gpu_utilization_ratio"), 300, q=0.95)),
       entity_labels=("node", "gpu"), threshold=0.95, for_s=300,
       # A GPU near 100 % is doing its job: load, which pages through queue wait and TTFT when it
       # hurts (capacity_exhausted reads this as context), and nothing when latency is unchanged.
       opens_incident=False,
       description="GPU utilisation p95 > 95 % for 5 min (context: load, opens no incident)"),
    _s(name="ecc_corrected_increase", layer="infrastructure", kind="counter_growth",
       record="node_gpu:oximeter_gpu_ecc_errors_corrected:increase5m",
       expr=ecc("corrected", 300),
       entity_labels=("node", "gpu"), increase=100, ratio=100, for_s=30, min_samples=2,
       description="corrected ECC +100 in 5 min, or × 100 its baseline rate with at least 5 in 5 min"),
    _s(name="ecc_corrected_burn", layer="infrastructure", kind="counter_growth",
       record="node_gpu:oximeter_gpu_ecc_errors_corrected:increase1h",
       expr=ecc("corrected", 3600),
       # A steady burn (10 a minute for hours) never makes +100 in 5 min, and once it has lasted
       # an hour it is its own baseline: an hour's total catches it. 300 is 5 a minute sustained;
       # a healthy card corrects a handful a day.
       entity_labels=("node", "gpu"), increase=300, window_s=3600, for_s=300,
       description="corrected ECC +300 in 1 h: a slow burn that no 5-min window catches"),
    _s(name="ecc_uncorrected_increase", layer="infrastructure", kind="counter_growth",
       expr=ecc("uncorrected", 300),
       entity_labels=("node", "gpu"), increase=1, for_s=0, min_samples=1,
       description="any uncorrectable ECC error: isolate now"),
    _s(name="xid_paging", layer="infrastructure", kind="counter_growth",
       # dcgm-exporter's Xid field is the last code, not a counter: its adapter records the events
       # it counts from the code's changes instead (alert_rules/adapters/dcgm.rules.yml).
       expr=q.Or(q.increase("oximeter_gpu_xid_errors_total", 300, PAGING),
                 q.Aggregate(q.select("node_gpu_xid:oximeter_gpu_xid_errors:increase5m", PAGING), "sum")),
       entity_labels=("node", "gpu", "xid"), increase=0.5, for_s=0, min_samples=1,
       description="a paging Xid (the GPU needs isolating)"),
    _s(name="pcie_replay_increase", layer="infrastructure", kind="counter_growth",
       record="node_gpu:oximeter_gpu_pcie_replay:increase5m",
       expr=q.increase("oximeter_gpu_pcie_replay_total", 300),
       entity_labels=("node", "gpu"), increase=100, ratio=100, for_s=30, min_samples=2,
       description="PCIe replays +100 in 5 min"),
    _s(name="nvlink_errors_increase", layer="infrastructure", kind="counter_growth",
       record="node_gpu_link:oximeter_gpu_nvlink_errors:increase5m",
       expr=q.increase("oximeter_gpu_nvlink_errors_total", 300, drop=("kind",)),
       # Per link, every data-link error kind together (CRC flit/data, replay, recovery): a healthy
       # link counts none, a failing one its CRC errors and as many replays.
       entity_labels=("node", "gpu", "link"), increase=100, ratio=100, for_s=30, min_samples=2,
       description="NVLink data-link errors +100 in 5 min on one link, or × 100 its baseline rate"),
    _s(name="engine_itl_peer", layer="infrastructure", kind="peer", unit="s",
       record=ITL_P50_RECORD, expr=ITL_P50,
       entity_labels=("node", "model"), peer_labels=("model",), for_s=300,
       min_traffic=ITL_GUARD,
       description="a node's median inter-token latency far above its same-model peers'"),
    # The same median against the node's own past: what a fleet too small to compare its nodes
    # (fewer than four of a model) still shows of a slower card; peer_outlier reads it with the
    # card its node-mates wait for. With no rule naming a cause, it opens an incident only beside
    # another anomalous signal (load and the engine's own faults move it too).
    _s(name="engine_itl_p50", layer="engine", kind="latency", unit="s",
       record=ITL_P50_RECORD, expr=ITL_P50,
       entity_labels=("node", "model"), ratio=1.5, min_delta=0.005, for_s=300,
       min_traffic=ITL_GUARD,
       description="a node's median inter-token latency > 1.5 × its baseline for 5 min"),
    _s(name="gpu_utilization_peer", layer="infrastructure", kind="peer",
       expr=q.Aggregate(q.OverTime(q.select("oximeter_gpu_utilization_ratio"), 300, q=0.5)),
       entity_labels=("node", "gpu"), peer_labels=("gpu_model",), direction="up", min_delta=0.1, for_s=300,
       # A slow GPU is the busy one: its tensor-parallel peers wait for it at every sync, and alone
       # it needs longer per token; the fleet's other GPUs of its model are the yardstick.
       description="a GPU busier than its same-model peers by 10 points or more, far outside their "
                   "spread (only same-model machines compare)"),
    _s(name="gpu_series_vanished", layer="platform", kind="presence", unit="s",
       expr=q.Age(q.select("oximeter_gpu_up")),
       entity_labels=("node", "gpu"), threshold=60, for_s=120,
       description="a GPU's telemetry stopped (it may have detached): no sample for 60 s, or gone"),
    _s(name="gpu_down", layer="platform", kind="gauge", direction="down",
       expr=q.gauge("oximeter_gpu_up"),
       entity_labels=("node", "gpu"), threshold=0.5, for_s=60,
       description="the exporter cannot read the GPU"),
    _s(name="target_down", layer="platform", kind="gauge", direction="down", expr=q.select("up"),
       entity_labels=("job", "instance"), threshold=0.5, for_s=60,
       description="a scrape target is down"),
    # Kubernetes' own view of the platform: kube-state-metrics through its adapter's records
    # (alert_rules/adapters/kubernetes.rules.yml), on stock and mixed inputs. A planned restart or
    # rollout is a change event (analyzer/service/kube_changes.py), not a page: these fire only on what
    # outlasts one.
    _s(name="container_restarts", layer="platform", kind="counter_growth", unit="restarts",
       expr=q.gauge("node_pod:kube_pod_container_status_restarts:increase5m", how="sum"),
       # One restart in 5 min is an upgrade in place or one crash the pod recovered from; a second
       # within minutes is a loop (CrashLoopBackOff waits 10 s, 20 s, 40 s, ... between tries).
       entity_labels=("node", "namespace", "pod"), increase=2, for_s=0, min_samples=1,
       description="a pod's containers restarted twice or more in 5 min: a restart loop"),
    _s(name="restart_loop", layer="platform", kind="counter_growth", unit="restarts",
       expr=q.gauge("node_pod:kube_pod_container_status_restarts:increase15m", how="sum"),
       # Three or more in 15 min (2.5: Prometheus's increase() extrapolates): a crash loop whose
       # back-off has grown to minutes restarts about once per 5 min, which the 5-min count misses.
       entity_labels=("node", "namespace", "pod"), increase=2.5, for_s=0, min_samples=1,
       description="a pod's containers restarted three times or more in 15 min: a crash loop"),
    _s(name="container_oom_killed", layer="platform", kind="counter_growth", unit="restarts",
       expr=q.gauge("node_pod:kube_pod_container_oom_kills:increase5m", how="sum"),
       # Any one: a container the kernel killed at its memory limit (last terminated reason
       # OOMKilled) and restarted.
       entity_labels=("node", "namespace", "pod"), increase=0.5, for_s=0, min_samples=1,
       description="a pod's container was OOM-killed (its memory limit reached) and restarted"),
    _s(name="pod_not_ready", layer="platform", kind="gauge", direction="down",
       expr=q.gauge("node_pod:kube_pod_ready:max"),
       # 10 min: longer than an engine takes to load its model after a planned restart.
       entity_labels=("node", "namespace", "pod"), threshold=0.5, for_s=600,
       description="a pod not Ready for 10 min"),
    _s(name="node_not_ready", layer="platform", kind="gauge", direction="down",
       expr=q.gauge("node:kube_node_ready:max"),
       # 10 min: a planned reboot of a GPU server (its firmware's checks included) is back within it.
       entity_labels=("node",), threshold=0.5, for_s=600,
       description="a node's Ready condition false or unknown for 10 min"),
    _s(name="kv_cache_usage", layer="engine", kind="ratio",
       record="node_model:vllm_kv_cache_usage:ratio",
       # Older vLLM names it gpu_cache_usage_perc: the `or` fallback.
       expr=q.Relabel(q.Aggregate(q.Or(q.select("vllm:kv_cache_usage_perc"),
                                       q.select("vllm:gpu_cache_usage_perc")))),
       entity_labels=("node", "model"), threshold=0.95, for_s=300,
       description="KV-cache usage ≥ 0.95"),
    _s(name="kv_pool_peer", layer="engine", kind="peer", unit="blocks",
       # The pool each engine sized at start (vLLM's cache_config_info, through its adapter): one
       # a sixth or more below its same-model peers' (the peer detector's 5 robust σ, floored at a
       # thirtieth of their median) runs out of blocks first, whatever the traffic now. Peers are
       # engines of one model, so a fleet that serves a model on cards of two sizes sees the
       # smaller cards' engines here.
       expr=LabelValue(q.gauge(KV_POOL_INFO), "num_gpu_blocks"),
       entity_labels=("node", "model", "engine"), peer_labels=("model",), direction="down", for_s=300,
       description="an engine's KV-cache pool (blocks) far below its same-model peers'"),
    _s(name="preemption_rate", layer="engine", kind="gauge", unit="1/s",
       record="node_model:vllm_num_preemptions:rate5m",
       # The series is `..._total`: vLLM's own example rule on `vllm:num_preemptions` never fires.
       expr=q.Relabel(q.increase("vllm:num_preemptions_total", 300, per_second=True)),
       entity_labels=("node", "model"), threshold=0.1, for_s=120,
       description="preemptions rising"),
    _s(name="prefix_cache_hit_ratio", layer="engine", kind="hit_rate",
       record="node_model:vllm_prefix_cache_hit:ratio_5m",
       expr=q.Relabel(q.Ratio(q.increase("vllm:prefix_cache_hits_total", 300, per_second=True),
                            q.increase("vllm:prefix_cache_queries_total", 300, per_second=True))),
       entity_labels=("node", "model"), min_delta=0.15, for_s=180,
       description="prefix-cache hit ratio dropping sharply"),
    # Counted by the gateway from each answer's bytes; the engine is what produced the empty answer.
    _s(name="empty_output_ratio", layer="engine", kind="ratio",
       record="service_node:oximeter_completions_empty:ratio_5m",
       expr=q.Ratio(q.increase("oximeter_empty_completions_total", 300), COMPLETIONS),
       entity_labels=("service", "node"), threshold=0.05, for_s=120,
       min_traffic=TrafficGuard.of(COMPLETIONS, 20),
       description="more than 5 % of completed answers carried no text over 5 min, with at least "
                   "20 answers"),
    # An engine up but not serving: it holds requests and makes no token for a minute (its scheduler
    # or model hung; its API server still answers /health, so only its counters tell). vLLM counts
    # each token as its step makes it, so a minute without one while requests run is no slow
    # request. Everything the gateway sees next (slots held, a full queue, 429s, 504s) follows.
    _s(name="engine_stalled", layer="engine", kind="gauge", unit="requests",
       record="node_model:vllm_num_requests_running:stalled_1m",
       expr=q.Relabel(Stalled(q.gauge("vllm:num_requests_running"),
                              (q.increase("vllm:generation_tokens_total", 60),))),
       entity_labels=("node", "model", "engine"), threshold=0.5, for_s=60,
       description="requests running in the engine and no token generated for 1 min, held 1 min: "
                   "up but not serving"),
    # The same seen from the gateway: requests in flight to the engine and nothing coming back for a
    # minute, neither an answer's end (it counts an answer's tokens then) nor a streamed chunk (each
    # observed as an inter-token gap), so a slow engine still streaming is not stalled. A node whose
    # every request in flight is an unstreamed answer longer than that is: raise for_s where so.
    # It also sees the hang vLLM's own gauges miss: a core that froze between two stats reports keeps
    # reporting what it last ran (none, if it stopped idle) while requests pile up in front of it.
    _s(name="upstream_stalled", layer="engine", kind="gauge", unit="requests",
       record="service_node:oximeter_inflight_requests:stalled_1m",
       expr=Stalled(q.gauge("oximeter_inflight_requests"),
                    (q.increase("oximeter_output_tokens_total", 60),
                     q.increase("oximeter_inter_token_seconds_count", 60))),
       entity_labels=("service", "node"), threshold=0.5, for_s=60,
       description="requests in flight to the engine and nothing back for 1 min (no answer ended, no "
                   "chunk streamed), held 1 min: the engine up but not serving, seen from the gateway"),
    _s(name="engine_ttft_p99", layer="engine", kind="latency", unit="s",
       record="node_model:vllm_time_to_first_token_seconds:p99_5m",
       expr=q.Relabel(q.p99("vllm:time_to_first_token_seconds")),
       entity_labels=("node", "model"), ratio=1.5, min_delta=0.1, for_s=600, clear_s=300,
       min_traffic=observations("vllm:time_to_first_token_seconds", model=True),
       # The same symptom as the gateway's ttft_p99 (the SLO signal), seen inside the engine through
       # vLLM's coarse buckets (1 s → 2.5 s): evidence that localises a TTFT rise to the engine,
       # never an incident by itself (the SLO is on the gateway's TTFT).
       opens_incident=False,
       description="engine TTFT p99 > 1.5 × its baseline for 5 min beyond its 5-min window "
                   "(evidence only, opens no incident)"),
    _s(name="process_rss_trend", layer="engine", kind="trend", unit="ratio",
       expr=q.Ratio(q.gauge("oximeter_process_resident_memory_bytes"),
               q.gauge("oximeter_host_memory_total_bytes"), on=("node",)),
       # The share of the host's memory, so that full is 1 and the leak's time to full is the
       # host running out (the OOM killer), whatever the host's size.
       entity_labels=("node", "process"), window_s=1800, capacity=1.0, for_s=600,
       description="process RSS rising steadily (leak), with the time until it fills the host's memory"),
    _s(name="gpu_memory_trend", layer="engine", kind="trend", unit="ratio",
       record="node_gpu:oximeter_gpu_memory_used:ratio",
       expr=q.Ratio(q.gauge("oximeter_gpu_memory_used_bytes"), q.gauge("oximeter_gpu_memory_total_bytes")),
       # The share of the card in use, so that full is 1 whatever the card's size. An engine
       # preallocates its share at start and then holds it flat: a steady rise is a leak.
       entity_labels=("node", "gpu"), window_s=1800, capacity=1.0, for_s=600,
       description="GPU memory in use rising steadily (framebuffer leak), with time to full"),
    _s(name="dependency_latency_p99", layer="dependency", kind="latency", unit="s",
       record="dependency:oximeter_dependency_duration_seconds:p99_5m",
       expr=q.p99("oximeter_dependency_duration_seconds"),
       entity_labels=("node", "dependency"), ratio=1.5, min_delta=0.02, for_s=180,
       description="dependency latency p99 > 1.5 × its baseline"),
    _s(name="cache_hit_ratio", layer="dependency", kind="hit_rate",
       record="cache:oximeter_cache_requests_hit:ratio_5m",
       expr=q.Ratio(q.increase("oximeter_cache_requests_total", 300, {"result": "hit"}, ("result",),
                               per_second=True), CACHE_REQUESTS),
       entity_labels=("node", "cache"), min_delta=0.15, for_s=180,
       min_traffic=TrafficGuard.of(CACHE_REQUESTS, 1),
       description="cache hit rate falling (e.g. 95 % → 60 %)"),
)}

# Defaults for ``oximeter detect --signal-kind KIND`` on a series of unknown meaning.
KIND_DEFAULTS: dict[str, SignalSpec] = {
    # Flagged at once (the detector itself asks for a record surprise and tells an anomaly once).
    "gauge": _s(name="gauge", layer="engine", kind="gauge", promql="", entity_labels=(), for_s=0,
                min_samples=1, direction="both", generic="neighbour_surprise"),
    "latency": _s(name="latency", layer="scheduling", kind="latency", promql="", entity_labels=(),
                  ratio=1.5, for_s=300),
    "ratio": _s(name="ratio", layer="ingress", kind="ratio", promql="", entity_labels=(), for_s=300),
    "counter_growth": _s(name="counter", layer="infrastructure", kind="counter_growth", promql="",
                         entity_labels=(), increase=100, ratio=100, for_s=60, min_samples=2),
    "hit_rate": _s(name="hit_rate", layer="dependency", kind="hit_rate", promql="", entity_labels=(),
                   min_delta=0.15, for_s=300),
    "trend": _s(name="trend", layer="engine", kind="trend", promql="", entity_labels=(), window_s=1800,
                for_s=600),
    "peer": _s(name="peer", layer="infrastructure", kind="peer", promql="", entity_labels=(), for_s=300,
               direction="both"),
    "presence": _s(name="presence", layer="platform", kind="presence", promql="", entity_labels=(),
                   for_s=120),
}


def build_catalogue(overrides: Mapping[str, Mapping[str, Any]] | None = None,
                    base: Mapping[str, SignalSpec] | None = None) -> dict[str, SignalSpec]:
    """The catalogue with ``overrides`` applied: fields of a known signal are replaced, an unknown
    name defines a new signal (it then needs ``layer``, ``kind`` and ``promql``).
    A bad override raises ConfigError naming ``analyzer.signals.<name>.<field>``."""
    out = dict(CATALOGUE if base is None else base)
    problems: list[str] = []
    for name, fields in (overrides or {}).items():
        known = out.get(name)
        # The expressions are not dumped: carried as they are, unless the override replaces the
        # query (a query written as PromQL alone is not replayed).
        merged: dict[str, Any] = {}
        if known is not None:
            merged = {**known.model_dump(), "expr": known.expr, "min_traffic": known.min_traffic}
        merged.update({**fields, "name": name})
        if "promql" in fields and "expr" not in fields:
            merged["expr"] = None
        # The shipped recording rule computes the shipped query: the store's copy would be read in
        # place of a configured one (silently), so a new query drops the record unless it names one.
        if ("promql" in fields or "expr" in fields) and "record" not in fields:
            merged["record"] = None
        try:
            out[name] = SignalSpec.model_validate(merged)
        except ValidationError as exc:
            for err in exc.errors():
                key = ".".join(str(p) for p in err["loc"])
                problems.append(f"analyzer.signals.{name}.{key}: {err['msg']}")
    if problems:
        raise ConfigError(problems)
    return out
