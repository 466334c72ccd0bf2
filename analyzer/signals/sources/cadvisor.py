"""The engine's memory on a stock fleet, as ``alert_rules/adapters/kubernetes.rules.yml`` records
it from the kubelet's cAdvisor series, computed on a replay's raw history.

Each container's working set (``container_memory_working_set_bytes``; labels namespace, pod and
container) on a node that serves vLLM, joined to its node by ``kube_pod_info``, is the process
memory the leak signal reads (``process``: the container's name); the node's memory capacity from
kube-state-metrics is the host's total. ``tests/analyzer/test_analyzer_cadvisor_replay.py`` checks
them against the rules.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from analyzer.signals.query import aggregate
from analyzer.signals.raw import Labeled, RawStore
from analyzer.signals.sources.kube import pods_nodes

WORKING_SET = "container_memory_working_set_bytes"
# The pod's own cgroup has no container name; "POD" is the pause container on older runtimes.
_NOT_CONTAINERS = ("", "POD")


def cadvisor_translated(store: RawStore) -> Iterator[tuple[str, Labeled]]:
    """The engine-memory records of the store's cAdvisor and kube-state-metrics series."""
    working, nodes = store.select(WORKING_SET), pods_nodes(store)
    vllm = store.select("vllm:num_requests_running")
    per_node = tuple({"node": la.get("node", "")} for la in vllm.labels)
    serving = aggregate(Labeled(vllm.values, per_node), (), "max")
    on_node = {la.get("node"): np.isfinite(serving.values[:, col]) for col, la in enumerate(serving.labels)}
    cols, labels = [], []
    for col, la in enumerate(working.labels):
        node = nodes.get((la.get("namespace", ""), la.get("pod", "")))
        if node is None or node not in on_node or la.get("container", "") in _NOT_CONTAINERS:
            continue
        cols.append(np.where(on_node[node], working.values[:, col], np.nan))
        labels.append({"node": node, "namespace": la["namespace"], "pod": la["pod"],
                       "container": la["container"], "process": la["container"]})
    if cols:
        yield "oximeter_process_resident_memory_bytes", aggregate(
            Labeled(np.stack(cols, axis=1).astype(np.float32), tuple(labels)), (), "max")
    capacity = store.select("kube_node_status_capacity", {"resource": "memory"})
    if capacity.labels:
        nodes_memory = Labeled(capacity.values, tuple({"node": la["node"]} for la in capacity.labels))
        yield "oximeter_host_memory_total_bytes", aggregate(nodes_memory, (), "max")
