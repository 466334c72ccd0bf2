"""kube-state-metrics' restart records, as ``alert_rules/adapters/kubernetes.rules.yml`` writes them,
computed on a replay's raw history (which has no Prometheus): container restarts of each pod in
15 min, and the restarts in 5 min of containers whose last termination was an OOM kill, each on
the pod's node (from ``kube_pod_info``). ``tests/analyzer/test_analyzer_kube_replay.py`` checks
them against the rules.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from analyzer.signals.raw import Labeled, RawStore

RESTARTS = "kube_pod_container_status_restarts_total"
OOM_KILLED = {"reason": "OOMKilled"}


def increase(values: np.ndarray, steps: int) -> np.ndarray:
    """Per column, how much the counter rose over the last ``steps`` steps (a fall is a reset: the
    new value counts, as Prometheus's increase() takes it); NaN where the counter has no sample."""
    previous = np.vstack([values[:1], values[:-1]])
    delta = values - previous
    delta = np.where(delta < 0, values, delta)
    total = np.cumsum(np.where(np.isfinite(delta), delta, 0.0), axis=0)
    if steps <= 0:
        return np.where(np.isfinite(values), 0.0, np.nan)
    before = np.vstack([np.zeros((min(steps, len(total)), total.shape[1])), total[:-steps]])
    return np.where(np.isfinite(values), total - before[:len(total)], np.nan)


def _pods(store: RawStore) -> dict[tuple[str, str], str]:
    """(namespace, pod) -> its node."""
    info = store.select("kube_pod_info")
    return {(la.get("namespace", ""), la.get("pod", "")): la["node"] for la in info.labels if "node" in la}


def _per_pod(values: np.ndarray, labels: tuple[dict[str, str], ...],
             nodes: dict[tuple[str, str], str]) -> Iterator[tuple[dict[str, str], np.ndarray]]:
    """The columns summed per pod on a known node (``sum by (node, namespace, pod)``)."""
    groups: dict[tuple[str, str], list[int]] = {}
    for col, la in enumerate(labels):
        key = (la.get("namespace", ""), la.get("pod", ""))
        if key in nodes:
            groups.setdefault(key, []).append(col)
    for (namespace, pod), cols in groups.items():
        part = values[:, cols]
        summed = np.where(np.isfinite(part).any(axis=1), np.nansum(part, axis=1), np.nan)
        yield {"node": nodes[(namespace, pod)], "namespace": namespace, "pod": pod}, summed


def kube_translated(store: RawStore) -> Iterator[tuple[str, Labeled]]:
    """The restart records of the store's kube-state-metrics series."""
    restarts = store.select(RESTARTS)
    nodes = _pods(store)
    if not restarts.labels or not nodes:
        return
    step_s = float(store.step_s)
    per_15m = increase(restarts.values.astype(np.float64), round(900 / step_s))
    for labels, values in _per_pod(per_15m, restarts.labels, nodes):
        yield "node_pod:kube_pod_container_status_restarts:increase15m", Labeled(
            values.astype(np.float32)[:, None], (labels,))
    # Restarts in 5 min of a container whose last terminated reason is OOMKilled at that time.
    reason = store.select("kube_pod_container_status_last_terminated_reason", OOM_KILLED)
    killed = {(la.get("namespace"), la.get("pod"), la.get("container")): reason.values[:, col]
              for col, la in enumerate(reason.labels)}
    if not killed:
        return
    per_5m = increase(restarts.values.astype(np.float64), round(300 / step_s))
    cols, oom = [], []
    for col, la in enumerate(restarts.labels):
        flag = killed.get((la.get("namespace"), la.get("pod"), la.get("container")))
        if flag is not None:
            cols.append(col)
            oom.append(np.where(flag == 1, per_5m[:, col], np.nan))
    if cols:
        stacked = np.stack(oom, axis=1)
        for labels, values in _per_pod(stacked, tuple(restarts.labels[c] for c in cols), nodes):
            yield "node_pod:kube_pod_container_oom_kills:increase5m", Labeled(
                values.astype(np.float32)[:, None], (labels,))
