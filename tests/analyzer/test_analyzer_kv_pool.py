"""Each engine's KV-cache pool on a stock fleet: vLLM's cache_config_info (its pool only as the
num_gpu_blocks label) read through the vLLM adapter's record, as a number, on a replay and from a
Prometheus answer; an engine whose pool is a tenth of its same-model peers' is an anomaly at any
traffic."""

from __future__ import annotations

import numpy as np
import pandas as pd

from alert_rules import ADAPTERS_DIR, load_groups
from analyzer.detection.evaluate import evaluate_signal
from analyzer.signals.catalogue import CATALOGUE
from analyzer.signals.label_value import as_values
from analyzer.signals.raw import RawStore
from analyzer.signals.sources.matrix import decode_matrix
from drills.detected import signal_frames
from oximeter.promql import metric_names

MODEL = "Qwen/Qwen3-8B"
SPEC = CATALOGUE["kv_pool_peer"]


def _info(node: str, blocks: str, engine: str = "0") -> dict[str, str]:
    # The label set of tests/fixtures/real/vllm-v1.prom's cache_config_info, scraped by the vllm job.
    return {"block_size": "16", "cache_dtype": "auto", "cpu_kvcache_space_bytes": "4294967296",
            "enable_prefix_caching": "True", "engine": engine, "gpu_memory_utilization": "0.9",
            "num_cpu_blocks": "0", "num_gpu_blocks": blocks, "num_gpu_blocks_override": "None",
            "sliding_window": "None", "swap_space_bytes": "4294967296", "node": node,
            "instance": f"ns/vllm-{node}", "job": "vllm"}


def _store(pools: dict[str, str], minutes: int = 30) -> RawStore:
    """A stock fleet's vLLM engines (idle: no requests at all) with the given pools."""
    index = pd.date_range("2026-01-07T00:00:00Z", periods=minutes * 4, freq="15s")
    names, labels = [], []
    for node, blocks in pools.items():
        names += ["vllm:cache_config_info", "vllm:num_requests_running"]
        labels += [_info(node, blocks), {"model_name": MODEL, "engine": "0", "node": node,
                                         "instance": f"ns/vllm-{node}", "job": "vllm"}]
    values = np.tile(np.array([[1.0, 0.0] * len(pools)], dtype=np.float32), (len(index), 1))
    return RawStore(index, names, labels, values)


POOLS = {"n1": "2772", "n2": "27720", "n3": "27720", "n4": "27720", "n5": "27688"}


def test_an_engine_with_a_tenth_of_its_peers_pool_is_an_anomaly_at_no_traffic() -> None:
    frames, _step = signal_frames(_store(POOLS), {"kv_pool_peer": SPEC}, stock=True)
    frame = frames["kv_pool_peer"]
    by_node = {frame.labels_of(c)["node"]: float(frame.values[c].iloc[-1]) for c in frame.values.columns}
    assert by_node == {"n1": 2772.0, "n2": 27720.0, "n3": 27720.0, "n4": 27720.0, "n5": 27688.0}
    assert all(frame.labels_of(c)["model"] == MODEL for c in frame.values.columns)
    events = evaluate_signal(SPEC, frame)
    assert [(dict(e.labels)["node"], e.value, e.baseline) for e in events] == [("n1", 2772.0, 27720.0)]


def test_equal_pools_and_a_small_difference_are_no_anomaly() -> None:
    frames, _step = signal_frames(_store({**POOLS, "n1": "26000"}), {"kv_pool_peer": SPEC}, stock=True)
    assert evaluate_signal(SPEC, frames["kv_pool_peer"]) == []


def test_the_replay_reads_the_record_the_adapter_rule_writes() -> None:
    rules = {r["record"] for g in load_groups(ADAPTERS_DIR / "vllm.rules.yml") for r in g["rules"]}
    assert metric_names(SPEC.promql) <= rules


def test_a_prometheus_answer_has_the_label_read_as_its_value() -> None:
    grid = pd.date_range("2026-01-07T00:00:00Z", periods=3, freq="15s")
    t0 = grid[0].timestamp()
    answer = [{"metric": {"node": "n1", "model": MODEL, "engine": "0", "num_gpu_blocks": "2772",
                          "block_size": "16"}, "values": [[t0, "1"], [t0 + 15, "1"]]},
              {"metric": {"node": "n2", "model": MODEL, "engine": "0", "num_gpu_blocks": "None",
                          "block_size": "16"}, "values": [[t0, "1"]]}]
    frame = as_values(SPEC, decode_matrix([answer], grid, 15.0))
    n1 = next(c for c in frame.values.columns if frame.labels_of(c)["node"] == "n1")
    assert "num_gpu_blocks" not in frame.labels_of(n1)
    assert frame.values[n1].tolist()[:2] == [2772.0, 2772.0] and np.isnan(frame.values[n1].iloc[2])
    n2 = next(c for c in frame.values.columns if frame.labels_of(c)["node"] == "n2")
    assert frame.values[n2].isna().all()  # an unset pool is no number
