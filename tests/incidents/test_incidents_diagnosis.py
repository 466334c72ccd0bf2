"""Every diagnosis rule through one table: the named function on its own (fires or not), then the
whole ordered table (which rule wins), with the root cause, severity and sentence it yields."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import pytest
from incident_cases import ev, gpu

from analyzer.detection.events import AnomalyEvent
from analyzer.diagnosis import rules as dx
from analyzer.diagnosis.case import THROTTLE_REASON, Case, Snapshot
from analyzer.diagnosis.rules import diagnose
from analyzer.diagnosis.verdicts import symptom_severity
from analyzer.signals.spec import SignalSpec
from oximeter.config import parse_config

N0 = {"service": "chat", "node": "node-0"}
Q = ev("queue_wait_p99", 4.8, 0.787, on=N0)  # 6.1 × baseline
Q_SOFT = ev("queue_wait_p99", 0.6, 0.25, on=N0)  # elevated but under the 1 s P0 line
MODEL = (("model", "m"), ("node", "node-0"))
UTIL_LOW: Snapshot = {"gpu_utilization_p95": {gpu(): 0.32, gpu(index="1"): 0.32}}
UTIL_HIGH: Snapshot = {"gpu_utilization_p95": {gpu(): 0.93}}
KV_FULL: Snapshot = {"kv_cache_usage": {MODEL: 0.97}}
KV_OK: Snapshot = {"kv_cache_usage": {MODEL: 0.80}}
# The most requests node-0's engine held in its own waiting queue over the last 15 min.
ENGINE_WAITED: Snapshot = {dx.ENGINE_WAITING: {(("node", "node-0"),): 3.0}}
ENGINE_NEVER_WAITED: Snapshot = {dx.ENGINE_WAITING: {(("node", "node-0"),): 0.0}}
ENGINE_CAUGHT_ONE: Snapshot = {dx.ENGINE_WAITING: {(("node", "node-0"),): 1.0}}
TTFT = ev("ttft_p99", 1.2, 0.4, on=N0)
# 19 % of node-0's requests turned away with 429; its queue-wait p99's window held 30 observations
# (too few to judge: 50), or 400.
REJECTED = ev("rejected_429_ratio", 0.19, 0.05, on=N0, route="/v1/chat/completions")
QUEUE_TOO_LIGHT: Snapshot = {"queue_wait_p99:traffic": {tuple(sorted(N0.items())): 30.0}}
QUEUE_JUDGED: Snapshot = {"queue_wait_p99:traffic": {tuple(sorted(N0.items())): 400.0}}
# The engine's own TTFT (vLLM's histogram) on node-0: its requests wait for each other's prefill.
ENGINE_TTFT = ev("engine_ttft_p99", 2.4, 0.4, node="node-0", model="m")
PREEMPT = ev("preemption_rate", 0.38, 0.1, node="node-0", model="m")
PREFIX_DROP = ev("prefix_cache_hit_ratio", 0.2, 0.7, node="node-0", model="m")
# A few preemptions per 5 min, under the rising-preemptions threshold (0.1/s).
PREEMPTING: Snapshot = {"preemption_rate": {MODEL: 0.03}}
THERMAL: Snapshot = {"gpu_temperature": {gpu(): 91.0}, "gpu_sm_clock_ratio": {gpu(): 0.55},
                     dx.THERMAL_REASON: {gpu(): 1.0}}
HOT_NO_REASON: Snapshot = {**THERMAL, dx.THERMAL_REASON: {gpu(): 0.0}}
# A mild throttle: the thermal reason active at 92 °C, the SM clock only down to 80 %.
MILD: Snapshot = {**THERMAL, "gpu_temperature": {gpu(): 92.0}, "gpu_sm_clock_ratio": {gpu(): 0.8}}
AT_LIMIT: Snapshot = {**THERMAL, "gpu_temperature": {gpu(): 85.0}}
NO_CLOCK: Snapshot = {"gpu_temperature": {gpu(): 91.0}, dx.THERMAL_REASON: {gpu(): 1.0}}
WARM: Snapshot = {**THERMAL, "gpu_temperature": {gpu(): 80.0}}
DEP = ev("dependency_latency_p99", 0.8, 0.02, node="node-0", dependency="vectordb")
CACHE = ev("cache_hit_ratio", 0.60, 0.95, onset=1, node="node-0", cache="redis")
PEER = ev("engine_itl_peer", 0.09, 0.03, node="node-0", model="m")
ITL_OWN = ev("engine_itl_p50", 0.038, 0.019, node="node-0", model="m")
# 3 % of the host's memory, growing by 48.1 % of that an hour; full in three and a half days.
RSS_LEAK = replace(ev("process_rss_trend", 0.03, None, node="node-0", process="vllm"), score=0.481,
                   time_to_full_s=3.5 * 86400)
# 90 % of the card, rising 5 % of that per hour: 4.5 points an hour, full in 1.5 h.
GPU_LEAK = replace(ev("gpu_memory_trend", 0.9, None, node="node-0", gpu="0"), score=0.05,
                   time_to_full_s=5400.0)
# Answers without text: 12 % of them; just over the shipped 5 % line; exactly at it (an event a
# configured baseline judge could open, which the limit does not back).
EMPTY = ev("empty_output_ratio", 0.12, None, on=N0)
EMPTY_JUST_OVER = ev("empty_output_ratio", 0.051, None, on=N0)
EMPTY_AT_LIMIT = ev("empty_output_ratio", 0.05, 0.01, on=N0)
# An external work queue growing by 0.25 items a second that never emptied.
QGROW = ev("external_queue_growth", 0.25, None, node="node-0", queue="jobs")
ENGINE = {"node": "node-0", "model": "m", "model_name": "m", "engine": "0"}
HUNG = ev("engine_stalled", 8, 0.5, **ENGINE)  # 8 running, no token for a minute
HUNG_UPSTREAM = ev("upstream_stalled", 12, 0.5, model="m", **N0)  # 12 in flight, nothing back
# Requests per 5 min of the same-model peers on other nodes.
PEER_TRAFFIC = {(("model", "m"), ("node", f"node-{i}")): 600.0 for i in (1, 2, 3)}
# Two nodes of four GPUs: node-0's GPU 2 busier than everything else, or all of node-0 busier.
GPUS_ONE_SLOW: Snapshot = {"gpu_utilization_peer": {
    **{gpu(node, str(i)): 0.24 for node in ("node-0", "node-1") for i in range(4)}, gpu("node-0", "2"): 0.36}}
GPUS_NODE_BUSY: Snapshot = {"gpu_utilization_peer": {
    **{gpu("node-1", str(i)): 0.24 for i in range(4)}, **{gpu("node-0", str(i)): 0.35 for i in range(4)},
    gpu("node-0", "2"): 0.36}}


def merge(*snaps: Snapshot) -> Snapshot:
    out: dict = {}
    for s in snaps:
        out.update(s)
    return out


@dataclass(frozen=True)
class Row:
    name: str
    rule: dx.Rule
    events: tuple[AnomalyEvent, ...]
    snapshot: Snapshot = field(default_factory=dict)
    fires: bool = True
    winner: str = ""  # the rule the whole table picks (defaults to ``rule`` when it fires)
    root: str = ""  # root-cause signal of the winner
    severity: str = ""
    sentence: str = ""


ROWS = [
    Row("paging xid", dx.xid_critical,
        (ev("xid_paging", 1, 0, node="node-0", gpu="0", xid="79"), Q), root="xid_paging", severity="critical",
        sentence="paging Xid 79 on gpu=0,node=node-0,xid=79: isolate the GPU; "
                 "impact: queue_wait p99 4.8 s = 6.1 × baseline"),
    Row("xid 48 reporting an uncorrectable ECC error on the same GPU", dx.xid_critical,
        (ev("xid_paging", 1, 0, node="node-0", gpu="1", xid="48"),
         ev("ecc_uncorrected_increase", 1, 0, node="node-0", gpu="1")), fires=False,
        winner="ecc_uncorrectable", root="ecc_uncorrected_increase"),
    Row("xid on another GPU than the ECC error", dx.xid_critical,
        (ev("xid_paging", 1, 0, node="node-0", gpu="2", xid="79"),
         ev("ecc_uncorrected_increase", 1, 0, node="node-0", gpu="1")), root="xid_paging"),
    Row("xid needs a paging xid event", dx.xid_critical, (Q,), UTIL_LOW, fires=False,
        winner="scheduling_bottleneck"),
    Row("uncorrectable ecc", dx.ecc_uncorrectable,
        (ev("ecc_uncorrected_increase", 2, 0, node="node-0", gpu="1"),),
        root="ecc_uncorrected_increase", severity="critical",
        sentence="2 uncorrectable ECC error(s) on gpu=1,node=node-0: isolate the GPU"),
    Row("ecc storm", dx.ecc_storm, (ev("ecc_corrected_increase", 240, 2, node="node-0", gpu="0"),),
        root="ecc_corrected_increase", severity="critical",
        sentence="corrected ECC +240 in 5 min on gpu=0,node=node-0 (baseline 2): drain the node"),
    Row("a corrected ecc storm loses to an uncorrectable error", dx.ecc_storm,
        (ev("ecc_corrected_increase", 240, 2, node="node-0", gpu="0"),
         ev("ecc_uncorrected_increase", 1, 0, onset=3, node="node-0", gpu="0")),
        winner="ecc_uncorrectable", root="ecc_uncorrected_increase"),
    Row("ecc slow burn", dx.ecc_slow_burn, (ev("ecc_corrected_burn", 600, 0, node="node-0", gpu="0"),),
        root="ecc_corrected_burn", severity="warning",
        sentence="corrected ECC +600 in 1 h on gpu=0,node=node-0 (10.0 a minute): schedule a drain"),
    Row("a slow burn that became a storm is the storm", dx.ecc_slow_burn,
        (ev("ecc_corrected_burn", 600, 0, node="node-0", gpu="0"),
         ev("ecc_corrected_increase", 240, 2, onset=1, node="node-0", gpu="0")),
        winner="ecc_storm", root="ecc_corrected_increase", severity="critical"),
    Row("a degraded nvlink names its link, the engine's slowdown its impact", dx.nvlink_degraded,
        (ev("nvlink_errors_increase", 3165, 0, node="node-0", gpu="1", link="2"), PEER),
        root="nvlink_errors_increase", severity="warning",
        sentence="NVLink 2 of GPU 1 on node-0: +3165 data-link errors (CRC, replay, recovery) in 5 min "
                 "(baseline 0): drain the node and reseat or replace the link; "
                 "impact: engine_itl_peer 90 ms = 3.0 × baseline"),
    Row("nvlink errors with the P0 queue wait are critical", dx.nvlink_degraded,
        (ev("nvlink_errors_increase", 400, 0, node="node-0", gpu="1", link="0"), Q),
        root="nvlink_errors_increase", severity="critical"),
    Row("a degraded nvlink loses to an uncorrectable ecc error on its card", dx.nvlink_degraded,
        (ev("nvlink_errors_increase", 400, 0, node="node-0", gpu="1", link="0"),
         ev("ecc_uncorrected_increase", 1, 0, onset=1, node="node-0", gpu="1")),
        winner="ecc_uncorrectable", root="ecc_uncorrected_increase"),
    Row("a slow engine without link errors is no nvlink fault", dx.nvlink_degraded, (PEER, Q_SOFT),
        fires=False, winner="peer_outlier", root="engine_itl_peer"),
    Row("thermal throttle with LOW utilisation", dx.thermal_throttle, (Q_SOFT,), merge(UTIL_LOW, THERMAL),
        root="gpu_temperature", severity="warning",
        sentence="GPU gpu=0,node=node-0 at 91 °C, SM clock 55 % of max with a thermal reason, "
                 "while queue_wait p99 600 ms = 2.4 × baseline"),
    Row("a mild throttle: thermal reason at 92 °C with the clock at 80 %", dx.thermal_throttle,
        (ev("gpu_temperature", 92, 70, node="node-0", gpu="0"),), MILD, root="gpu_temperature",
        severity="warning",
        sentence="GPU gpu=0,node=node-0 at 92 °C, SM clock 80 % of max with a thermal reason"),
    Row("a thermal reason with the temperature at, not past, its 85 °C limit", dx.thermal_throttle,
        (Q_SOFT,), merge(UTIL_LOW, AT_LIMIT), fires=False, winner="scheduling_bottleneck"),
    Row("a thermal reason past the limit with no clock series", dx.thermal_throttle, (Q_SOFT,),
        merge(UTIL_LOW, NO_CLOCK), root="gpu_temperature", severity="warning",
        sentence="GPU gpu=0,node=node-0 at 91 °C, with a thermal reason, "
                 "while queue_wait p99 600 ms = 2.4 × baseline"),
    Row("hot and slow but no thermal reason", dx.thermal_throttle, (Q_SOFT,), merge(UTIL_LOW, HOT_NO_REASON),
        fires=False, winner="scheduling_bottleneck"),
    Row("80 °C is not thermal throttling", dx.thermal_throttle, (Q_SOFT,), merge(UTIL_HIGH, WARM),
        fires=False, winner="capacity_exhausted"),
    Row("thermal on its own anomaly, no latency symptom (low traffic)", dx.thermal_throttle,
        (ev("gpu_temperature", 91, 70, node="node-0", gpu="0"),), THERMAL, root="gpu_temperature",
        severity="warning",
        sentence="GPU gpu=0,node=node-0 at 91 °C, SM clock 55 % of max with a thermal reason"),
    Row("neither latency nor the throttle itself is anomalous", dx.thermal_throttle,
        (ev("rejected_429_ratio", 0.2, 0.0, node="node-0", service="chat"),), THERMAL,
        fires=False, winner="unclassified"),
    Row("peer outlier", dx.peer_outlier, (PEER, Q_SOFT), root="engine_itl_peer", severity="warning",
        sentence="model=m,node=node-0: engine_itl_peer 90 ms = 3.0 × baseline of its same-model peers, "
                 "no throttle reason; impact: queue_wait p99 600 ms = 2.4 × baseline"),
    Row("a throttled outlier is not a peer outlier", dx.peer_outlier, (PEER,),
        {THROTTLE_REASON: {gpu(): 1.0}}, fires=False, winner="unclassified", root="engine_itl_peer"),
    Row("a GPU busier than its same-model peers", dx.peer_outlier,
        (ev("gpu_utilization_peer", 0.37, 0.20, node="node-0", gpu="2"), Q_SOFT), root="gpu_utilization_peer",
        severity="warning"),
    # Eight GPUs, one 1.35 x slower: busier than its seven peers, its own node-mates included.
    Row("one GPU slower than its seven peers", dx.peer_outlier,
        (ev("gpu_utilization_peer", 0.36, 0.24, node="node-0", gpu="2"),), GPUS_ONE_SLOW,
        root="gpu_utilization_peer", severity="warning"),
    Row("a GPU as busy as its node-mates: the node moved (load), not the card", dx.peer_outlier,
        (ev("gpu_utilization_peer", 0.36, 0.24, node="node-0", gpu="2"),), GPUS_NODE_BUSY,
        fires=False, winner="unclassified", root="gpu_utilization_peer"),
    Row("a busy node at the peak is capacity, not a peer outlier", dx.peer_outlier,
        (ev("gpu_utilization_peer", 0.97, 0.6, node="node-0", gpu="0"), Q),
        merge(GPUS_NODE_BUSY, {"gpu_utilization_p95": {gpu(index=str(i)): 0.97 for i in range(4)}}),
        fires=False, winner="capacity_exhausted", root="queue_wait_p99"),
    Row("a node slower than its peers at the same traffic", dx.peer_outlier, (PEER,),
        {"engine_itl_peer:traffic": {MODEL: 600.0, **PEER_TRAFFIC}}, root="engine_itl_peer"),
    Row("a node slower than its peers names the card its node-mates wait for", dx.peer_outlier, (PEER,),
        merge(GPUS_ONE_SLOW, {"engine_itl_peer:traffic": {MODEL: 600.0, **PEER_TRAFFIC}}),
        root="gpu_utilization_peer",
        sentence="gpu=2,node=node-0: busier than its node-mates (36 % against 24 %) while engine_itl_peer "
                 "90 ms = 3.0 × baseline of its same-model peers, no throttle reason"),
    Row("a node slower than its peers whose cards are all as busy: the node is named", dx.peer_outlier,
        (PEER,), merge(GPUS_NODE_BUSY, {"engine_itl_peer:traffic": {MODEL: 600.0, **PEER_TRAFFIC}}),
        root="engine_itl_peer"),
    # Too few nodes of the model to compare: the node's median inter-token latency against its own past.
    Row("a node's tokens slower than they used to be, one card busier than its mates", dx.peer_outlier,
        (ITL_OWN,), GPUS_ONE_SLOW, root="gpu_utilization_peer",
        sentence="gpu=2,node=node-0: busier than its node-mates (36 % against 24 %) while engine_itl_p50 "
                 "38 ms = 2.0 × baseline, no throttle reason"),
    Row("a node's tokens slower than they used to be, its cards all as busy: not a card", dx.peer_outlier,
        (ITL_OWN,), GPUS_NODE_BUSY, fires=False, winner="unclassified", root="engine_itl_p50"),
    Row("a node slower than its peers only as much as it is busier: load", dx.peer_outlier, (PEER,),
        {"engine_itl_peer:traffic": {MODEL: 1800.0, **PEER_TRAFFIC}}, fires=False, winner="unclassified",
        root="engine_itl_peer"),
    # Preempting sequences for KV blocks slows every token of the batch: the gap is KV pressure.
    Row("a node slower than its peers while its engine preempts", dx.peer_outlier, (PEER, PREEMPT),
        fires=False, winner="kv_pressure", root="preemption_rate"),
    Row("a node slower than its peers with its KV cache full", dx.peer_outlier, (PEER, Q_SOFT), KV_FULL,
        fires=False, winner="kv_pressure", root="kv_cache_usage"),
    Row("a node slower than its peers with room in its KV cache", dx.peer_outlier, (PEER, Q_SOFT), KV_OK,
        root="engine_itl_peer"),
    Row("a cooling GPU's peer gap is not a peer outlier (throttle anomaly still in the window)",
        dx.peer_outlier, (ev("gpu_utilization_peer", 0.5, 0.22, node="node-0", gpu="0"),
                          ev("gpu_temperature", 91, 70, node="node-0", gpu="0")),
        fires=False, winner="unclassified", root="gpu_temperature"),
    Row("gpu vanished", dx.telemetry_lost,
        (ev("gpu_series_vanished", 0, 1, onset=2, node="node-1", gpu="2"),),
        root="gpu_series_vanished", severity="warning",
        sentence="GPU telemetry lost on gpu=2,node=node-1 since 10:02 UTC"),
    Row("target down", dx.telemetry_lost, (ev("target_down", 0, 1, job="gateway", instance="10.0.0.1:8000"),),
        root="target_down",
        sentence="scrape target down on instance=10.0.0.1:8000,job=gateway since 10:00 UTC"),
    Row("seed 001 §5 compound", dx.dependency_degraded,
        (DEP, CACHE, ev("queue_wait_p99", 3.0, 0.5, onset=3, on=N0),
         ev("gpu_utilization_p95", 0.32, 0.8, onset=5, node="node-0", gpu="0")),
        UTIL_LOW, root="dependency_latency_p99", severity="critical",
        sentence="dependency_latency p99 800 ms = 40.0 × baseline, cache_hit_ratio 60 % = 0.6 × baseline, "
                 "GPU util 32 %; impact: queue_wait p99 3.0 s = 6.0 × baseline, "
                 "gpu_utilization p95 32 % = 0.4 × baseline"),
    Row("cache hit rate alone", dx.dependency_degraded, (CACHE,), root="cache_hit_ratio", severity="warning"),
    Row("no dependency anomaly", dx.dependency_degraded, (Q,), UTIL_HIGH, fires=False,
        winner="capacity_exhausted"),
    Row("rss leak", dx.engine_leak, (RSS_LEAK,),
        root="process_rss_trend",
        sentence="node=node-0,process=vllm: RSS 3.0 % of the host's memory, rising 48.1 % per hour, "
                 "full in 3.5 d"),
    Row("gpu memory leak", dx.gpu_memory_leak, (GPU_LEAK,), root="gpu_memory_trend", severity="warning",
        sentence="gpu=0,node=node-0: GPU memory 90 % used, rising 4.5 points per hour, full in 1.5 h"),
    Row("gpu memory leak under an hour from full", dx.gpu_memory_leak,
        (replace(GPU_LEAK, value=0.98, time_to_full_s=1800.0),), root="gpu_memory_trend",
        sentence="gpu=0,node=node-0: GPU memory 98 % used, rising 4.9 points per hour, full in 30 min"),
    Row("a full card stalls the engine: the queue and the KV cache are its impact", dx.gpu_memory_leak,
        (GPU_LEAK, ev("queue_wait_p99", 4.8, 0.787, onset=2, on=N0)), merge(UTIL_HIGH, KV_FULL),
        root="gpu_memory_trend", severity="critical"),
    Row("kv full", dx.kv_pressure, (Q,), merge(UTIL_HIGH, KV_FULL), root="kv_cache_usage",
        severity="critical",
        sentence="queue_wait p99 4.8 s = 6.1 × baseline while KV cache 97 % full"),
    Row("preemptions", dx.kv_pressure, (Q_SOFT, ev("preemption_rate", 0.5, 0.0, node="node-0", model="m")),
        KV_OK, root="preemption_rate", severity="warning"),
    Row("preemptions need no queue: the engine preempts only when KV blocks run out", dx.kv_pressure,
        (PREEMPT, TTFT), KV_OK, root="preemption_rate", severity="warning",
        sentence="preemption_rate 0.38 = 3.8 × baseline: KV cache exhausted; "
                 "impact: ttft p99 1.2 s = 3.0 × baseline"),
    Row("preemptions with the cache seen full name the cache", dx.kv_pressure, (PREEMPT,), KV_FULL,
        root="kv_cache_usage"),
    Row("a full cache without preemptions or a queue is only load", dx.kv_pressure,
        (ev("kv_cache_usage", 0.97, 0.6, node="node-0", model="m"),), KV_FULL, fires=False,
        winner="unclassified", root="kv_cache_usage"),
    Row("kv not full, no preemption", dx.kv_pressure, (Q,), merge(UTIL_HIGH, KV_OK), fires=False,
        winner="capacity_exhausted"),
    Row("TTFT up while its engine queues and preempts under the rising threshold: the requests wait "
        "for KV blocks", dx.kv_pressure, (TTFT,), merge(UTIL_LOW, ENGINE_WAITED, KV_OK, PREEMPTING),
        root="preemption_rate",
        sentence="ttft p99 1.2 s = 3.0 × baseline while its engine held requests waiting and preempted "
                 "0.03/s"),
    Row("a pool far below its peers' is KV pressure at any traffic", dx.kv_pressure,
        (ev("kv_pool_peer", 2772, 27720, node="node-0", model="m", engine="0"),), KV_OK,
        root="kv_pool_peer", severity="warning",
        sentence="KV-cache pool 2772 blocks, 10 % of its same-model peers' 27720: it runs out of "
                 "blocks before its peers as load rises"),
    Row("a queue beside a small pool names the pool", dx.kv_pressure,
        (Q, ev("kv_pool_peer", 2772, 27720, node="node-0", model="m", engine="0")), merge(UTIL_LOW, KV_OK),
        root="kv_pool_peer",
        sentence="queue_wait p99 4.8 s = 6.1 × baseline while its KV-cache pool is 2772 blocks, 10 % of its "
                 "same-model peers' 27720"),
    Row("a full cache beside a small pool names the cache, and the pool", dx.kv_pressure,
        (Q, ev("kv_pool_peer", 2772, 27720, node="node-0", model="m", engine="0")), merge(UTIL_HIGH, KV_FULL),
        root="kv_cache_usage",
        sentence="queue_wait p99 4.8 s = 6.1 × baseline while KV cache 97 % full (its KV-cache pool "
                 "2772 blocks, 10 % of its same-model peers' 27720)"),
    Row("TTFT up while its engine queues with the KV cache full", dx.kv_pressure, (TTFT,),
        merge(UTIL_LOW, ENGINE_WAITED, KV_FULL), root="kv_cache_usage"),
    Row("a preempting engine that never queued: TTFT alone is not KV pressure", dx.kv_pressure, (TTFT,),
        merge(UTIL_LOW, ENGINE_NEVER_WAITED, KV_OK, PREEMPTING), fires=False, winner="unclassified",
        root="ttft_p99"),
    Row("TTFT up inside the engine and at the gateway while it preempts: the pool", dx.kv_pressure,
        (TTFT, ENGINE_TTFT), merge(UTIL_LOW, ENGINE_NEVER_WAITED, KV_OK, PREEMPTING),
        root="preemption_rate",
        sentence="ttft p99 1.2 s = 3.0 × baseline while its engine's own TTFT rose as it preempted 0.03/s"),
    Row("the engine's own TTFT up without preemptions is not the pool", dx.kv_pressure,
        (TTFT, ENGINE_TTFT), merge(UTIL_LOW, ENGINE_NEVER_WAITED, KV_OK), fires=False,
        winner="capacity_exhausted", root="ttft_p99"),
    Row("prefix collapse", dx.prefix_cache_collapse,
        (ev("prefix_cache_hit_ratio", 0.2, 0.7, node="node-0", model="m"),
         ev("ttft_p99", 1.2, 0.4, onset=2, on=N0)), root="prefix_cache_hit_ratio",
        sentence="prefix_cache_hit_ratio 20 % = 0.3 × baseline while ttft p99 1.2 s = 3.0 × baseline"),
    Row("prefix drop without TTFT", dx.prefix_cache_collapse,
        (ev("prefix_cache_hit_ratio", 0.2, 0.7, node="node-0", model="m"),), root="prefix_cache_hit_ratio",
        severity="info"),
    # Without TTFT up the drop is named on its own, as information: on a node too quiet for a TTFT
    # p99 (fewer requests in its window than the guard asks) or one whose TTFT is judged and calm.
    Row("prefix drop on a node too quiet to judge its TTFT", dx.prefix_cache_collapse, (PREFIX_DROP,),
        {"ttft_p99:traffic": {tuple(sorted(N0.items())): 12.0}}, root="prefix_cache_hit_ratio",
        severity="info", sentence="prefix_cache_hit_ratio 20 % = 0.3 × baseline; ttft_p99 not judged: "
                                  "12 requests in its 5-min window, fewer than the 50 it needs"),
    Row("prefix drop with TTFT judged and not up", dx.prefix_cache_collapse, (PREFIX_DROP,),
        {"ttft_p99:traffic": {tuple(sorted(N0.items())): 120.0}}, root="prefix_cache_hit_ratio",
        severity="info", sentence="prefix_cache_hit_ratio 20 % = 0.3 × baseline; TTFT not past its margin: "
                                  "the engine absorbs the extra prefill at this load"),
    Row("prefix collapse whose prefills hold up every token: the node's gap to its peers is impact",
        dx.prefix_cache_collapse,
        (PREFIX_DROP, ev("engine_itl_peer", 0.09, 0.03, onset=60, node="node-0", model="m")),
        root="prefix_cache_hit_ratio",
        sentence="prefix_cache_hit_ratio 20 % = 0.3 × baseline while engine_itl_peer 90 ms = 3.0 × baseline"),
    Row("TTFT up without a prefix-cache drop is no collapse", dx.prefix_cache_collapse, (TTFT,),
        fires=False, winner="unclassified", root="ttft_p99"),
    Row("a peer gap on another node than the collapsed cache is that node's (the drop alone: information)",
        dx.prefix_cache_collapse,
        (PREFIX_DROP, ev("engine_itl_peer", 0.09, 0.03, onset=2, node="node-1", model="m")),
        winner="peer_outlier", root="engine_itl_peer"),
    Row("empty answers", dx.empty_outputs, (EMPTY,), root="empty_output_ratio", severity="warning",
        sentence="12 % of the answers on node=node-0,service=chat were empty: the engine answers with "
                 "nothing (template, adapter or model)"),
    Row("empty answers just over the limit", dx.empty_outputs, (EMPTY_JUST_OVER,), root="empty_output_ratio"),
    Row("empty answers at the limit are not past it", dx.empty_outputs, (EMPTY_AT_LIMIT,), fires=False,
        winner="unclassified", root="empty_output_ratio"),
    Row("empty answers with the queue backed up and the GPUs busy: the engine's answers are the fault",
        dx.empty_outputs, (EMPTY, ev("queue_wait_p99", 4.8, 0.787, onset=2, on=N0)), UTIL_HIGH,
        root="empty_output_ratio", severity="critical"),
    Row("empty answers from a card that filled up: the leak is the cause", dx.empty_outputs,
        (GPU_LEAK, ev("empty_output_ratio", 0.12, None, onset=2, on=N0)),
        winner="gpu_memory_leak", root="gpu_memory_trend"),
    Row("a hung engine: its queue, 429s and 504s are impact, whichever crossed first", dx.engine_hung,
        (ev("rejected_429_ratio", 0.6, 0.05, onset=-1, on=N0, route="/v1/chat/completions"), Q,
         ev("error_504_ratio", 1.0, 0.0, onset=-1, on=N0, route="/v1/chat/completions"), HUNG),
        UTIL_LOW, root="engine_stalled", severity="critical"),
    Row("a hung engine seen from its gateway", dx.engine_hung, (HUNG_UPSTREAM,), root="upstream_stalled",
        severity="warning",
        sentence="node-0's engine (m) holds 12 request(s) in flight to it and sent nothing back for a "
                 "minute: up but not serving (hung)"),
    Row("no stall: the queue and 429s of a busy engine are no hang", dx.engine_hung, (Q, REJECTED), UTIL_HIGH,
        fires=False, winner="capacity_exhausted"),
    Row("an engine stalled by a card full of leaked memory: the leak", dx.engine_hung,
        (GPU_LEAK, ev("engine_stalled", 8, 0.5, onset=2, **ENGINE)), winner="gpu_memory_leak",
        root="gpu_memory_trend"),
    Row("capacity", dx.capacity_exhausted, (Q,), UTIL_HIGH, root="queue_wait_p99", severity="critical",
        sentence="queue_wait p99 4.8 s = 6.1 × baseline while GPU util 93 %: capacity exhausted"),
    Row("bursts: the engine's own queue filled while utilisation looks low", dx.capacity_exhausted, (Q,),
        merge(UTIL_LOW, ENGINE_WAITED), root="queue_wait_p99", severity="critical",
        sentence="queue_wait p99 4.8 s = 6.1 × baseline while its engine held up to 3 requests waiting "
                 "for a batch slot (GPU util 32 %): capacity exhausted"),
    Row("an engine that never queued is not full", dx.capacity_exhausted, (Q,),
        merge(UTIL_LOW, ENGINE_NEVER_WAITED, KV_OK), fires=False, winner="scheduling_bottleneck"),
    Row("one request caught waiting for the scheduler's next step is not a full engine",
        dx.capacity_exhausted, (Q,), merge(UTIL_LOW, ENGINE_CAUGHT_ONE, KV_OK), fires=False,
        winner="scheduling_bottleneck"),
    Row("another node's engine queue is not this group's", dx.capacity_exhausted, (Q,),
        merge(UTIL_LOW, {dx.ENGINE_WAITING: {(("node", "node-7"),): 5.0}}, KV_OK), fires=False,
        winner="scheduling_bottleneck"),
    Row("TTFT up before the queue-wait event, engine queue filled", dx.capacity_exhausted, (TTFT,),
        merge(UTIL_LOW, ENGINE_WAITED), root="ttft_p99"),
    Row("TTFT up with the GPUs busy but no queue seen yet", dx.capacity_exhausted, (TTFT,), UTIL_HIGH,
        fires=False, winner="unclassified", root="ttft_p99"),
    Row("busy GPUs and a full engine queue: utilisation is named", dx.capacity_exhausted, (Q,),
        merge(UTIL_HIGH, ENGINE_WAITED), root="queue_wait_p99",
        sentence="queue_wait p99 4.8 s = 6.1 × baseline while GPU util 93 %: capacity exhausted"),
    Row("busy GPUs, a full engine queue, TTFT up before the queue-wait event", dx.capacity_exhausted,
        (TTFT,), merge(UTIL_HIGH, ENGINE_WAITED), root="ttft_p99"),
    Row("TTFT up, engines neither full nor queued", dx.capacity_exhausted, (TTFT,),
        merge(UTIL_LOW, ENGINE_NEVER_WAITED), fires=False, winner="unclassified", root="ttft_p99"),
    Row("the engine's own TTFT up with the queue: the engine is full behind its admission limit",
        dx.capacity_exhausted, (Q, ENGINE_TTFT), merge(UTIL_LOW, ENGINE_NEVER_WAITED, KV_OK),
        root="queue_wait_p99", severity="critical",
        sentence="queue_wait p99 4.8 s = 6.1 × baseline while its engine's own engine_ttft p99 2.4 s = "
                 "6.0 × baseline (GPU util 32 %): capacity exhausted"),
    Row("TTFT up inside the engine and at the gateway, no queue-wait event yet", dx.capacity_exhausted,
        (TTFT, ENGINE_TTFT), merge(UTIL_LOW, ENGINE_NEVER_WAITED), root="ttft_p99"),
    Row("the engine's own TTFT up alone is a slower engine, not a queue", dx.capacity_exhausted,
        (ENGINE_TTFT,), merge(UTIL_LOW, ENGINE_NEVER_WAITED), fires=False, winner="unclassified",
        root="engine_ttft_p99"),
    # The engine preempted two sequences 10 min ago; its 5-min rate is back at 0 by now.
    Row("TTFT up inside the engine that preempted in the last 15 min: the pool, not a batch slot",
        dx.kv_pressure, (TTFT, ENGINE_TTFT),
        merge(UTIL_LOW, ENGINE_WAITED, {"preemption_rate": {MODEL: 0.0}},
              {dx.ENGINE_PREEMPTED: {(("node", "node-0"),): 2.0}}),
        root="preemption_rate", severity="warning",
        sentence="ttft p99 1.2 s = 3.0 × baseline while its engine held requests waiting and preempted 2 "
                 "sequence(s) in the last 15 min"),
    Row("a node serving three times its peers' requests that preempted: load, not its pool",
        dx.kv_pressure, (TTFT, ENGINE_TTFT),
        merge(UTIL_LOW, ENGINE_WAITED, {"preemption_rate": {MODEL: 0.0}},
              {dx.ENGINE_PREEMPTED: {(("node", "node-0"),): 2.0}},
              {"engine_itl_peer:traffic": {MODEL: 1800.0, **PEER_TRAFFIC}}),
        fires=False, winner="capacity_exhausted", root="ttft_p99"),
    Row("an engine that preempted nothing in the last 15 min is full, not short of KV blocks",
        dx.kv_pressure, (TTFT, ENGINE_TTFT),
        merge(UTIL_LOW, ENGINE_WAITED, {"preemption_rate": {MODEL: 0.0}},
              {dx.ENGINE_PREEMPTED: {(("node", "node-0"),): 0.0}}),
        fires=False, winner="capacity_exhausted", root="ttft_p99"),
    Row("middling utilisation is neither full nor idle", dx.capacity_exhausted, (Q,),
        {"gpu_utilization_p95": {gpu(): 0.6}}, fires=False, winner="unclassified", root="queue_wait_p99"),
    # Behind the gateway's admission limit: the gateway queues, the engine never fills, and the
    # node's GPUs are all busier than the other node's.
    Row("middling utilisation, every GPU of the queue's node above its peers: the node took more load",
        dx.capacity_exhausted, (Q, ev("gpu_utilization_peer", 0.36, 0.24, node="node-0", gpu="2")),
        merge(GPUS_NODE_BUSY, ENGINE_NEVER_WAITED, {"gpu_utilization_p95": {gpu(): 0.6}}),
        root="queue_wait_p99", severity="critical",
        sentence="queue_wait p99 4.8 s = 6.1 × baseline while its GPUs all busier than their peers (like "
                 "gpu_utilization_peer 36 % = 1.5 × baseline): capacity exhausted"),
    Row("middling utilisation and one card above its peers is that card, not load", dx.capacity_exhausted,
        (Q, ev("gpu_utilization_peer", 0.36, 0.24, node="node-0", gpu="2")),
        merge(GPUS_ONE_SLOW, ENGINE_NEVER_WAITED, {"gpu_utilization_p95": {gpu(): 0.6}}), fires=False,
        winner="peer_outlier", root="gpu_utilization_peer"),
    # No queue: node-0 takes three times the requests of each other node, its GPUs 1.5 x theirs.
    Row("a node serving several times its peers' requests, every GPU busier by less: load, at info",
        dx.capacity_exhausted, (ev("gpu_utilization_peer", 0.36, 0.24, node="node-0", gpu="2"),),
        merge(GPUS_NODE_BUSY, {"engine_itl_peer:traffic": {MODEL: 1800.0, **PEER_TRAFFIC}}),
        root="gpu_utilization_peer", severity="info",
        sentence="node=node-0 serves 3.0 × its peers' requests, every GPU of it busier (like "
                 "gpu_utilization_peer 36 % = 1.5 × baseline): its headroom goes first; no queue yet"),
    Row("a node a little busier with a little more traffic is ordinary spread, not load",
        dx.capacity_exhausted,
        (ev("gpu_utilization_peer", 0.29, 0.24, node="node-0", gpu="2"),),
        merge({"gpu_utilization_peer": {**{gpu("node-1", str(i)): 0.24 for i in range(4)},
                                        **{gpu("node-0", str(i)): 0.29 for i in range(4)}}},
              {"engine_itl_peer:traffic": {MODEL: 780.0, **PEER_TRAFFIC}}),
        fires=False, winner="unclassified", root="gpu_utilization_peer"),
    Row("a node whose GPUs are all busier at its peers' traffic is not load", dx.capacity_exhausted,
        (ev("gpu_utilization_peer", 0.36, 0.24, node="node-0", gpu="2"),),
        merge(GPUS_NODE_BUSY, {"engine_itl_peer:traffic": {MODEL: 600.0, **PEER_TRAFFIC}}), fires=False,
        winner="unclassified", root="gpu_utilization_peer"),
    Row("one card busier at a busier node's traffic is that card", dx.capacity_exhausted,
        (ev("gpu_utilization_peer", 0.36, 0.24, node="node-0", gpu="2"),),
        merge(GPUS_ONE_SLOW, {"engine_itl_peer:traffic": {MODEL: 1800.0, **PEER_TRAFFIC}}), fires=False,
        winner="peer_outlier", root="gpu_utilization_peer"),
    Row("another node's GPUs above their peers are not this queue's load", dx.capacity_exhausted,
        (Q, ev("gpu_utilization_peer", 0.36, 0.24, node="node-1", gpu="2")),
        merge({"gpu_utilization_peer": {**{gpu("node-0", str(i)): 0.24 for i in range(4)},
                                        **{gpu("node-1", str(i)): 0.35 for i in range(4)}}},
              ENGINE_NEVER_WAITED, {"gpu_utilization_p95": {gpu(): 0.6}}), fires=False,
        winner="unclassified"),
    Row("scheduling bottleneck", dx.scheduling_bottleneck, (Q,), merge(UTIL_LOW, KV_OK),
        root="queue_wait_p99",
        severity="critical", sentence="queue_wait p99 4.8 s = 6.1 × baseline while GPU util 32 %"),
    Row("429s on a node too light for its queue-wait p99: the queue seen from outside",
        dx.scheduling_bottleneck, (REJECTED,), merge(UTIL_LOW, KV_OK, QUEUE_TOO_LIGHT),
        root="rejected_429_ratio"),
    Row("429s where the queue-wait p99 is judged and calm are not the queue's evidence",
        dx.scheduling_bottleneck, (REJECTED,), merge(UTIL_LOW, KV_OK, QUEUE_JUDGED), fires=False,
        winner="unclassified", root="rejected_429_ratio"),
    Row("lower-layer anomaly on the joined node", dx.scheduling_bottleneck,
        (Q, ev("gpu_temperature", 88, 70, onset=2, node="node-0", gpu="1")), UTIL_LOW, fires=False,
        winner="unclassified", root="gpu_temperature"),
    Row("kv full is not a scheduling bottleneck", dx.scheduling_bottleneck, (Q,), merge(UTIL_LOW, KV_FULL),
        fires=False, winner="kv_pressure"),
    Row("no utilisation known", dx.scheduling_bottleneck, (Q,), fires=False, winner="unclassified",
        root="queue_wait_p99"),
    Row("an external queue nobody drains", dx.queue_undrained, (QGROW,), root="external_queue_growth",
        severity="warning",
        sentence="queue jobs on node-0 grows by 0.25 items a second and never empties: its workers do not "
                 "keep up"),
    Row("an external queue behind a slow dependency is its impact", dx.queue_undrained, (QGROW, DEP),
        fires=False, winner="dependency_degraded", root="dependency_latency_p99"),
    Row("an external queue behind a hot GPU is its impact", dx.queue_undrained,
        (QGROW, ev("gpu_temperature", 91, 70, onset=2, node="node-0", gpu="0")), fires=False,
        winner="unclassified", root="gpu_temperature"),
    Row("an external queue growing while the fleet is full: capacity", dx.queue_undrained, (QGROW, Q),
        UTIL_HIGH, winner="capacity_exhausted", root="queue_wait_p99"),
    Row("a restart loop is the platform's, the engine's slowdown its impact", dx.restart_loop,
        (ev("container_restarts", 3, 0, node="node-0", namespace="llm", pod="vllm-0"), TTFT, PREEMPT),
        root="container_restarts", severity="warning",
        sentence="pod llm/vllm-0 on node-0 restarted 3 times in 5 min: a restart loop; impact: "
                 "ttft p99 1.2 s = 3.0 × baseline, preemption_rate 0.38 = 3.8 × baseline"),
    Row("a pod kept out of service", dx.restart_loop,
        (ev("pod_not_ready", 0, 1, node="node-0", namespace="llm", pod="vllm-0"),), root="pod_not_ready",
        sentence="pod llm/vllm-0 on node-0 not Ready for 10 min"),
    Row("a paging xid that crashed the engine is the GPU's", dx.restart_loop,
        (ev("xid_paging", 1, 0, node="node-0", gpu="0", xid="79"),
         ev("container_restarts", 2, 0, onset=1, node="node-0", namespace="llm", pod="vllm-0")),
        winner="xid_critical", root="xid_paging"),
    Row("restarts need a restart event", dx.restart_loop, (PREEMPT,), fires=False, winner="kv_pressure"),
    Row("an engine killed at its memory limit: the OOM kill names the cause", dx.restart_loop,
        (ev("container_restarts", 2, 0, node="node-0", namespace="llm", pod="vllm-0"),
         ev("container_oom_killed", 1, 0, node="node-0", namespace="llm", pod="vllm-0"), TTFT),
        root="container_oom_killed", severity="warning",
        sentence="pod llm/vllm-0 on node-0 OOM-killed at its container's memory limit and restarted; "
                 "impact: ttft p99 1.2 s = 3.0 × baseline"),
    Row("a crash loop the 5-minute count misses", dx.restart_loop,
        (ev("restart_loop", 3, 0, node="node-0", namespace="llm", pod="vllm-0"),), root="restart_loop",
        sentence="pod llm/vllm-0 on node-0 restarted 3 times in 15 min: a crash loop"),
    Row("a node not Ready takes its pods and telemetry with it", dx.node_not_ready,
        (ev("node_not_ready", 0, 1, node="node-0"),
         ev("pod_not_ready", 0, 1, onset=1, node="node-0", namespace="llm", pod="vllm-0"),
         ev("target_down", 0, 1, onset=1, job="dcgm-exporter", instance="node-0:9400", node="node-0")),
        root="node_not_ready", severity="critical"),
    Row("a node that stays Ready is not the cause", dx.node_not_ready,
        (ev("container_restarts", 2, 0, node="node-0", namespace="llm", pod="vllm-0"),), fires=False,
        winner="restart_loop"),
    Row("504s at the edge", dx.ingress_errors,
        (ev("error_504_ratio", 0.04, 0.001, service="chat", node="node-0", route="/v1/chat/completions"),),
        root="error_504_ratio", severity="critical",
        sentence="error_504_ratio 4 % = 40.0 × baseline with a healthy queue and upstream"),
    Row("504s with the queue backed up", dx.ingress_errors,
        (ev("error_504_ratio", 0.04, 0.001, onset=4, on=N0), Q), fires=False, winner="unclassified",
        root="queue_wait_p99", severity="critical"),
]


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
def test_rule(row: Row) -> None:
    case = Case(row.events, frozenset({"node-0", "node-1"}), row.snapshot)
    own = row.rule(case)
    assert (own is not None) == row.fires
    verdict = diagnose(case)
    assert verdict.rule == (row.winner or row.rule.__name__)
    if row.root:
        assert verdict.root_cause.signal == row.root
    if row.severity:
        assert verdict.severity == row.severity
    if row.sentence:
        assert verdict.sentence == row.sentence
    assert verdict.runbook == f"docs/runbook.md#{verdict.rule}"


def test_where_the_inputs_have_no_clock_reasons_the_temperature_past_its_limit_is_thermal() -> None:
    hot = Case((ev("gpu_temperature", 91, 70, node="node-0", gpu="0"),), frozenset({"node-0"}),
               {"gpu_temperature": {gpu(): 91.0}})
    assert dx.thermal_throttle(hot) is None  # reasons readable but none active: not a throttle
    # On dcgm-exporter's default counters the reasons are not collected: the analyzer says so.
    unreadable = parse_config({"analyzer": {"inputs": "stock"}}).analyzer.unreadable_context()
    assert dx.THERMAL_REASON in unreadable
    assert parse_config({"analyzer": {"inputs": "oximeter"}}).analyzer.unreadable_context() == frozenset()
    verdict = diagnose(replace(hot, unreadable=unreadable))
    assert (verdict.rule, verdict.root_cause.signal) == ("thermal_throttle", "gpu_temperature")
    assert verdict.sentence == "GPU gpu=0,node=node-0 at 91 °C, past its limit (clock reasons not exported)"
    warm = replace(hot, snapshot={"gpu_temperature": {gpu(): 80.0}}, unreadable=unreadable)
    assert dx.thermal_throttle(warm) is None


def test_every_rule_has_a_positive_and_a_negative_row() -> None:
    positives = {r.rule.__name__ for r in ROWS if r.fires}
    negatives = {r.rule.__name__ for r in ROWS if not r.fires}
    # These fire on their one signal alone: their negative case is that signal's absence.
    single_signal = {"ecc_uncorrectable", "ecc_storm", "ecc_slow_burn", "telemetry_lost", "engine_leak",
                     "gpu_memory_leak"}
    assert positives == {r.__name__ for r in dx.RULES}
    assert negatives == {r.__name__ for r in dx.RULES} - single_signal


def test_rule_order_is_the_architecture_table() -> None:
    assert dx.RULE_IDS == (
        "xid_critical", "ecc_uncorrectable", "ecc_storm", "ecc_slow_burn", "nvlink_degraded",
        "thermal_throttle", "peer_outlier", "node_not_ready", "restart_loop", "telemetry_lost",
        "dependency_degraded", "engine_leak", "gpu_memory_leak", "engine_hung", "kv_pressure",
        "prefix_cache_collapse",
        "empty_outputs", "capacity_exhausted", "scheduling_bottleneck", "queue_undrained", "ingress_errors",
        "unclassified")


def test_unclassified_ranks_by_layer_then_onset() -> None:
    events = (ev("error_504_ratio", 0.05, 0.0, onset=0, on=N0), ev("ttft_p99", 2.0, 0.5, onset=1, on=N0),
              ev("queue_wait_p99", 0.5, 0.2, onset=2, on=N0))
    verdict = diagnose(Case(events, frozenset({"node-0"})))
    got = (verdict.rule, verdict.layer, verdict.root_cause.signal)
    assert got == ("unclassified", "scheduling", "ttft_p99")


def test_snapshot_from_other_nodes_is_ignored() -> None:
    snap: Snapshot = {"gpu_utilization_p95": {gpu("node-9"): 0.95, gpu(): 0.2}}
    verdict = diagnose(Case((Q,), frozenset({"node-0"}), snap))
    assert verdict.rule == "scheduling_bottleneck"


def test_empty_case_is_refused() -> None:
    with pytest.raises(ValueError):
        diagnose(Case(()))


def _configured(signals: dict[str, dict[str, float]]) -> Mapping[str, SignalSpec]:
    return parse_config({"analyzer": {"signals": signals}}).analyzer.catalogue()


@pytest.mark.parametrize(("threshold", "snapshot", "rule"), [
    (85, WARM, "capacity_exhausted"),  # as shipped: 80 °C is warm, not a throttle
    (75, WARM, "thermal_throttle"),  # a cooler-rated card: the same 80 °C is past its limit
    (85, THERMAL, "thermal_throttle"),
    (95, THERMAL, "capacity_exhausted"),  # a hotter-rated card: 91 °C is within its limit
])
def test_a_configured_temperature_threshold_reaches_the_thermal_rule(threshold: float, snapshot: Snapshot,
                                                                     rule: str) -> None:
    catalogue = _configured({"gpu_temperature": {"threshold": threshold}})
    case = Case((Q_SOFT,), frozenset({"node-0"}), merge(UTIL_HIGH, snapshot), catalogue=catalogue)
    assert diagnose(case).rule == rule


def test_a_configured_kv_threshold_reaches_the_kv_rules() -> None:
    """0.80 is not full as shipped (0.95); with the signal's threshold at 0.75 it is."""
    shipped = Case((Q,), frozenset({"node-0"}), merge(UTIL_LOW, KV_OK))
    assert diagnose(shipped).rule == "scheduling_bottleneck"
    lowered = replace(shipped, catalogue=_configured({"kv_cache_usage": {"threshold": 0.75}}))
    assert diagnose(lowered).rule == "kv_pressure"


def test_a_configured_queue_wait_threshold_sets_the_p0_line() -> None:
    """A 0.6 s queue-wait p99 is under the shipped 1 s P0 line, over a configured 0.5 s one."""
    case = Case((Q_SOFT,), frozenset({"node-0"}), UTIL_LOW)
    assert symptom_severity(case) == "info"
    lowered = replace(case, catalogue=_configured({"queue_wait_p99": {"threshold": 0.5}}))
    assert symptom_severity(lowered) == "critical"


@pytest.mark.parametrize(("threshold", "rule"), [(0.05, "empty_outputs"), (0.2, "unclassified")])
def test_a_configured_empty_output_threshold_reaches_its_rule(threshold: float, rule: str) -> None:
    """12 % empty answers are past the shipped 5 % line, within a configured 20 % one."""
    catalogue = _configured({"empty_output_ratio": {"threshold": threshold}})
    case = Case((EMPTY,), frozenset({"node-0"}), catalogue=catalogue)
    assert diagnose(case).rule == rule
