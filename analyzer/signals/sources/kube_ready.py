"""kube-state-metrics' readiness records, as ``alert_rules/adapters/kubernetes.rules.yml`` writes
them, computed on a replay's raw history: each node's Ready condition (1 true, 0 false or
unknown) and each pod's readiness on its node (joined through ``kube_pod_info``).
``tests/analyzer/test_analyzer_kube_replay.py`` checks them against the rules.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from analyzer.signals.query import aggregate
from analyzer.signals.raw import Labeled, RawStore
from analyzer.signals.sources.kube import pods_nodes

NODE_READY = "node:kube_node_ready:max"
POD_READY = "node_pod:kube_pod_ready:max"


def ready_translated(store: RawStore) -> Iterator[tuple[str, Labeled]]:
    """The node and pod readiness records of the store's kube-state-metrics series."""
    node = store.select("kube_node_status_condition", {"condition": "Ready", "status": "true"})
    if node.labels:
        yield NODE_READY, aggregate(Labeled(node.values, tuple({"node": la["node"]} for la in node.labels)),
                                    (), "max")
    pod, nodes = store.select("kube_pod_status_ready", {"condition": "true"}), pods_nodes(store)
    cols = [(col, nodes[key]) for col, la in enumerate(pod.labels)
            if (key := (la.get("namespace", ""), la.get("pod", ""))) in nodes]
    if cols:
        labels = tuple({"node": n, "namespace": pod.labels[c]["namespace"], "pod": pod.labels[c]["pod"]}
                       for c, n in cols)
        values = pod.values[:, [c for c, _ in cols]].astype(np.float32)
        yield POD_READY, aggregate(Labeled(values, labels), (), "max")
