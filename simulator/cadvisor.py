"""The engine pod's memory as the kubelet's cAdvisor endpoint (``/metrics/cadvisor``) shows it.

Labels are the kubelet's (id, name, image, pod, namespace, container; blank where a cgroup has
none): the engine container's working set is its process's RSS, and the pod's own cgroup (container
``""``) holds the same. The node is not a label: the scrape adds it, as a kubelet job does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from simulator.fleet import Fleet
from simulator.kube_state import CONTAINER, NAMESPACE, pod_of

IMAGE = "docker.io/vllm/vllm-openai:sim"


def cadvisor_families(fleet: Fleet, node: str, now: float) -> Iterator[Metric]:
    """``node``'s engine pod at simulated time ``now`` (while its engine runs)."""
    working = GaugeMetricFamily("container_memory_working_set_bytes", "Current working set in bytes.",
                                labels=["container", "id", "image", "name", "namespace", "pod"])
    pod, rss = pod_of(node), float(fleet.rss_bytes(node, now))
    cgroup = f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podsim_{node}.slice"
    working.add_metric(["", cgroup, "", "", NAMESPACE, pod], rss)
    scope = f"{cgroup}/cri-containerd-sim{node}.scope"
    working.add_metric([CONTAINER, scope, IMAGE, f"sim{node}", NAMESPACE, pod], rss)
    yield working


class CadvisorCollector(Collector):
    """``node``'s families above for a registry, at the simulation's time ``now()`` of each scrape
    (none while its engine restarts: the container is gone)."""

    def __init__(self, fleet: Fleet, node: str, now: Callable[[], float]) -> None:
        self.fleet = fleet
        self.node = node
        self.now = now

    def collect(self) -> Iterator[Metric]:
        now = self.now()
        if now >= self.fleet.nodes[self.node].down_until:
            yield from cadvisor_families(self.fleet, self.node, now)
