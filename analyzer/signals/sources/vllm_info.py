"""vLLM's ``vllm:cache_config_info`` with its engine's node and model, as
``alert_rules/adapters/vllm.rules.yml`` records it, computed on a replay's raw history.

vLLM writes the info series once per engine when the engine has sized its KV-cache pool, its
labels the CacheConfig fields (``num_gpu_blocks``, ``block_size``, ...) and ``engine``, but no
``model_name``: the model comes from the same server's other series (same node, scrape target and
engine). ``tests/analyzer/test_analyzer_kv_pool.py`` checks the replay against the rule.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from analyzer.signals.raw import Labeled, RawStore

CACHE_CONFIG_INFO = "vllm:cache_config_info"
KV_POOL_INFO = "node_model_engine:vllm_cache_config:info"
# The CacheConfig fields the record keeps: the pool's size in blocks and the tokens per block.
KEPT = ("num_gpu_blocks", "block_size")
# What tells one vLLM server's engine from another (the scrape gives node and instance).
_ENGINE = ("node", "instance", "engine")
# A series every vLLM engine writes with its model_name from its first scheduler step.
_MODEL_SOURCE = "vllm:num_requests_running"


def cache_config_translated(store: RawStore) -> Iterator[tuple[str, Labeled]]:
    """The pool record of each engine whose model the store names."""
    info = store.select(CACHE_CONFIG_INFO)
    if not info.labels:
        return
    models = {tuple(la.get(k, "") for k in _ENGINE): la["model_name"]
              for la in store.select(_MODEL_SOURCE).labels if "model_name" in la}
    cols, labels = [], []
    for col, la in enumerate(info.labels):
        model = models.get(tuple(la.get(k, "") for k in _ENGINE))
        if model is not None:
            cols.append(col)
            labels.append({**{k: la[k] for k in ("node", "engine", *KEPT) if k in la}, "model": model})
    if cols:
        yield KV_POOL_INFO, Labeled(info.values[:, cols].astype(np.float32), tuple(labels))
