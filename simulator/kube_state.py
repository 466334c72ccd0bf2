"""The fleet as kube-state-metrics would show it: one Ready node (its memory capacity the host's)
and one engine pod per node.

Names, types and labels follow kube-state-metrics v2, so the Kubernetes adapter rules
(``alert_rules/adapters/kubernetes.rules.yml``) read the simulator as they read a real cluster:
an engine_restart fault counts one container restart and holds the pod not-ready while the
engine is down (an engine_oom one the same, its container's last terminated reason OOMKilled; a
crash_loop one restart per crash); a rollout fault raises the deployment's generation and holds
the pod not-ready while its new engine starts (a replaced pod restarts no container). Each engine runs in pod
``vllm-<node>`` of deployment ``vllm`` in namespace ``llm``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from simulator.fleet import HOST_MEMORY_BYTES, Fleet

NAMESPACE = "llm"
DEPLOYMENT = "vllm"
CONTAINER = "vllm"
# kube-state-metrics reports each condition under all three statuses, 1 on the one that holds.
_STATUSES = ("true", "false", "unknown")


def pod_of(node: str) -> str:
    """The engine pod's name on ``node``."""
    return f"{DEPLOYMENT}-{node}"


def kube_state_families(fleet: Fleet, now: float, only: str | None = None) -> Iterator[Metric]:
    """Every family at simulated time ``now`` (``only``: that node's share; history samples per node)."""
    node_ready = GaugeMetricFamily("kube_node_status_condition", "The condition of a cluster node.",
                                   labels=["node", "condition", "status"])
    capacity = GaugeMetricFamily("kube_node_status_capacity",
                                 "The total amount of resources available for a node.",
                                 labels=["node", "resource", "unit"])
    info = GaugeMetricFamily("kube_pod_info", "Information about pod.",
                             labels=["namespace", "pod", "uid", "host_ip", "pod_ip", "node",
                                     "created_by_kind", "created_by_name", "priority_class", "host_network"])
    ready = GaugeMetricFamily("kube_pod_status_ready",
                              "Describes whether the pod is ready to serve requests.",
                              labels=["namespace", "pod", "uid", "condition"])
    restarts = CounterMetricFamily("kube_pod_container_status_restarts",
                                   "The number of container restarts per container.",
                                   labels=["namespace", "pod", "uid", "container"])
    terminated = GaugeMetricFamily("kube_pod_container_status_last_terminated_reason",
                                   "Describes the last reason the container was in terminated state.",
                                   labels=["namespace", "pod", "uid", "container", "reason"])
    for i, node in enumerate(fleet.nodes.values(), start=1):
        if only is not None and node.name != only:
            continue
        pod, uid = pod_of(node.name), f"sim-{node.name}"
        for status in _STATUSES:
            node_ready.add_metric([node.name, "Ready", status], float(status == "true"))
        capacity.add_metric([node.name, "memory", "byte"], float(HOST_MEMORY_BYTES))
        info.add_metric([NAMESPACE, pod, uid, f"10.0.0.{i}", f"10.1.{i}.4", node.name, "ReplicaSet",
                         f"{DEPLOYMENT}-sim", "", "false"], 1.0)
        holds = "true" if now >= node.down_until else "false"
        for status in _STATUSES:
            ready.add_metric([NAMESPACE, pod, uid, status], float(status == holds))
        # A restart fault that has fired is one restart of the engine's container.
        restarts.add_metric([NAMESPACE, pod, uid, CONTAINER], float(len(node.restarts_seen)))
        if node.last_terminated:
            terminated.add_metric([NAMESPACE, pod, uid, CONTAINER, node.last_terminated], 1.0)
    generation = GaugeMetricFamily("kube_deployment_metadata_generation",
                                   "Sequence number representing a specific generation of the desired state.",
                                   labels=["namespace", "deployment"])
    generation.add_metric([NAMESPACE, DEPLOYMENT], float(fleet.generation(now)))
    # One replica per node: those whose engine is down (restarting, or starting after a rollout).
    unavailable = GaugeMetricFamily("kube_deployment_status_replicas_unavailable",
                                    "The number of unavailable replicas per deployment.",
                                    labels=["namespace", "deployment"])
    unavailable.add_metric([NAMESPACE, DEPLOYMENT],
                           float(sum(now < node.down_until for node in fleet.nodes.values())))
    yield from (node_ready, capacity, info, ready, restarts, terminated, generation, unavailable)


class KubeStateCollector(Collector):
    """The families above for a registry, at the simulation's time ``now()`` of each scrape."""

    def __init__(self, fleet: Fleet, now: Callable[[], float]) -> None:
        self.fleet = fleet
        self.now = now

    def collect(self) -> Iterator[Metric]:
        yield from kube_state_families(self.fleet, self.now())
