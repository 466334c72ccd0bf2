"""What the local stack's Prometheus scrapes and evaluates, and when it is ready: every core target
up and every rule group evaluated since."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

import requests

from alert_rules import ADAPTERS_DIR, rule_files
from alert_rules.scale import write_scaled_rules
from oximeter.inputs import parse_timestamp
from stack.config import (
    DCGM_JOB,
    ENGINE_JOB,
    EXPORTER_JOB,
    GATEWAY_JOB,
    KUBE_STATE_INSTANCE,
    KUBE_STATE_JOB,
    KUBELET_JOB,
    Target,
    stable_instance,
)
from stack.options import Addon, Endpoints
from stack.procs import wait_until


def hostport(url: str) -> str:
    """``host:port`` of a URL."""
    return url.split("://", 1)[1].rstrip("/")


def rule_paths(workspace: Path, time_scale: float, *, stock: bool) -> list[Path]:
    """The rule files Prometheus loads, their durations divided by ``time_scale`` (written under
    ``workspace``) unless it is 1."""
    if time_scale != 1.0:
        rules = write_scaled_rules(workspace / "rules", time_scale)
        adapters = write_scaled_rules(workspace / "rules" / "adapters", time_scale, ADAPTERS_DIR)
    else:
        rules, adapters = rule_files(), rule_files(ADAPTERS_DIR)
    if stock:
        # The adapters, and the area rules without platform's checks of Oximeter's own jobs.
        rules = [*adapters, *(p for p in rules if p.name != "platform.rules.yml")]
    return rules


def scrape_targets(nodes: Sequence[str], ep: Endpoints, addons: Sequence[Addon], *,
                   stock: bool, kube: bool = True) -> list[Target]:
    """Every scrape target: each node's engine, gateway and exporter, the add-ons that listen; on a
    stock fleet the simulator's Kubernetes endpoints too, unless ``kube`` is False (real engines
    run with no Kubernetes around them)."""
    targets = [Target(ENGINE_JOB, hostport(ep.engines[n]), stable_instance(ENGINE_JOB, n), {"node": n})
               for n in nodes]
    targets += [Target(GATEWAY_JOB, hostport(ep.gateways[n]), stable_instance(GATEWAY_JOB, n))
                for n in nodes if n in ep.gateways]
    exporter_job = DCGM_JOB if stock else EXPORTER_JOB
    targets += [Target(exporter_job, hostport(ep.exporters[n]), stable_instance(exporter_job, n))
                for n in nodes if n in ep.exporters]
    if stock and kube:  # the simulator's kube-state-metrics, on its first engine's port
        targets.append(Target(KUBE_STATE_JOB, hostport(ep.simulator), KUBE_STATE_INSTANCE,
                              metrics_path="/kube-state/metrics"))
        # Each node's kubelet cAdvisor endpoint, on its engine's port; the node from the target.
        targets += [Target(KUBELET_JOB, hostport(ep.engines[n]), f"{n}:10250", {"node": n},
                           metrics_path="/metrics/cadvisor") for n in nodes]
    targets += [Target(a.scrape_job, hostport(ep.addons[a.name]), f"{a.name}:{a.scrape_job}")
                for a in addons if a.scrape_job and a.name in ep.addons]
    return targets


def wait_ready(url: str, ep: Endpoints, eval_interval_s: float, *, stock: bool, kube: bool = True) -> None:
    """Wait until Prometheus at ``url`` has every core target up and every rule group evaluated
    after that (``kube``: as ``scrape_targets``)."""
    # Add-ons start after Prometheus.
    core = {ENGINE_JOB, DCGM_JOB, KUBE_STATE_JOB, KUBELET_JOB} if stock else \
        {ENGINE_JOB, GATEWAY_JOB, EXPORTER_JOB}
    # A stock fleet has no gateway and adds kube-state-metrics and each node's kubelet (``kube``).
    expected = len(ep.engines) + len(ep.gateways) + len(ep.exporters) + \
        (1 + len(ep.engines) if stock and kube else 0)

    def all_up() -> bool:
        reply = requests.get(f"{url}/api/v1/targets", timeout=5).json()
        active = reply["data"]["activeTargets"]
        mine = [t for t in active if t["labels"]["job"] in core]
        return len(mine) == expected and all(t["health"] == "up" for t in mine)
    wait_until(all_up, 60, interval_s=0.2, what="every scrape target up")
    # Up says each target was scraped, not that a rule has read it since: a caller querying a
    # recording rule at once could find some nodes and not others. Every rule group evaluates
    # once more first (a rule that reads another rule's output may need one interval more).
    # A group's evaluation reads the samples up to its scheduled tick, which may lag the wall
    # clock it reports by up to an interval: one that started an interval after now has a tick
    # after every scrape so far.
    since = time.time() + eval_interval_s

    def evaluated_since() -> bool:
        groups = requests.get(f"{url}/api/v1/rules", timeout=5).json()["data"]["groups"]
        # Year 1 is Prometheus's "not evaluated yet": unbounded, so it reads as long ago.
        return all("lastEvaluation" in g and
                   parse_timestamp(g["lastEvaluation"], "lastEvaluation", bounded=False).timestamp()
                   > since for g in groups)
    wait_until(evaluated_since, max(60.0, 10 * eval_interval_s), interval_s=0.2,
               what="every rule group evaluated after the targets came up")
