"""Prometheus and Alertmanager configuration for the local stack, rendered from ``deploy/``'s intent.

``deploy/prometheus.yml`` finds compose services by DNS; here every target is a static
``127.0.0.1:port`` with the same job names and a stable ``instance`` (the one ``oximeter sim
history`` writes, ``<node>:<job port>``), so backfilled and live series are the same series.
``deploy/alertmanager.yml`` is kept (routes, inhibitions) with its timings and receiver replaced.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from alert_rules.scale import format_duration

DEPLOY_DIR = Path(__file__).resolve().parent.parent / "deploy"
GATEWAY_JOB = "oximeter-gateway"
ENGINE_JOB = "vllm"
EXPORTER_JOB = "oximeter-exporter"
# A stock fleet's jobs: dcgm-exporter and the kubelet on every node, one kube-state-metrics for the
# cluster.
DCGM_JOB = "dcgm-exporter"
KUBE_STATE_JOB = "kube-state-metrics"
KUBE_STATE_INSTANCE = "kube-state-metrics:8080"
# Each node's kubelet, for its cAdvisor endpoint (the engine container's memory).
KUBELET_JOB = "kubelet"
ANALYZER_JOB = "oximeter-analyzer"
RELAY_RECEIVER = "analyzer-relay"
# The port part of the stable instance names ``oximeter sim history`` writes (``n1:9400``); a live
# test checks that backfilled and live ``up`` series carry the same instance.
STABLE_PORTS = {ENGINE_JOB: 8000, GATEWAY_JOB: 9000, EXPORTER_JOB: 9400, DCGM_JOB: 9400}


def stable_instance(job: str, node: str) -> str:
    """The ``instance`` a node's target keeps across restarts on new ports (as history writes it)."""
    return f"{node}:{STABLE_PORTS[job]}" if job in STABLE_PORTS else f"{node}:{job}"


@dataclass(frozen=True)
class Target:
    """One scrape target: where it listens and the labels Prometheus gives it."""

    job: str
    address: str  # host:port
    instance: str
    labels: Mapping[str, str] = field(default_factory=dict)
    metrics_path: str = "/metrics"


@dataclass(frozen=True)
class Webhook:
    """Where Alertmanager sends notifications (the analyzer's relay in the full stack)."""

    url: str
    token_file: Path | None = None


def prometheus_config(targets: Sequence[Target], rule_files: Sequence[Path], *, scrape_interval_s: float,
                      eval_interval_s: float, alertmanager: str | None) -> dict[str, Any]:
    """A Prometheus configuration scraping ``targets`` (grouped by job) and loading ``rule_files``."""
    jobs: dict[str, list[dict[str, Any]]] = {}
    for t in targets:
        # Engines label their series with model_name only: the node comes from the target, as in
        # deploy/prometheus.yml. Gateways and exporters carry node themselves (a target label would
        # rename theirs to exported_node).
        jobs.setdefault(t.job, []).append({"targets": [t.address], "labels": {"instance": t.instance,
                                                                              **t.labels}})
    scrape_configs: list[dict[str, Any]] = []
    for job, groups in jobs.items():
        scrape: dict[str, Any] = {"job_name": job, "static_configs": groups}
        paths = {t.metrics_path for t in targets if t.job == job}
        if paths != {"/metrics"}:
            (scrape["metrics_path"],) = paths
        if job in (ENGINE_JOB, KUBE_STATE_JOB):
            # The target's node fills in only where a series has none: real vLLM series get it, the
            # simulator's dependency series keep their own instead of growing ``exported_node``;
            # kube-state-metrics' namespace, pod and node are the objects', kept as they are.
            scrape["honor_labels"] = True
        scrape_configs.append(scrape)
    config: dict[str, Any] = {
        "global": {"scrape_interval": format_duration(scrape_interval_s),
                   "evaluation_interval": format_duration(eval_interval_s)},
        "rule_files": [str(p) for p in rule_files],
        "scrape_configs": scrape_configs,
    }
    if alertmanager is not None:
        config["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": [alertmanager]}]}]}
    return config


def alertmanager_config(*, group_wait_s: float, group_interval_s: float, repeat_interval_s: float,
                        webhook: Webhook | None,
                        template: Path = DEPLOY_DIR / "alertmanager.yml") -> dict[str, Any]:
    """``deploy/alertmanager.yml`` with the stack's timings on every route and its own receiver.

    Without a webhook the receiver has no integration: alerts stay readable in Alertmanager's API.
    """
    config: dict[str, Any] = yaml.safe_load(template.read_text(encoding="utf-8"))
    timings = {"group_wait": format_duration(group_wait_s),
               "group_interval": format_duration(group_interval_s),
               "repeat_interval": format_duration(repeat_interval_s)}
    route = config["route"]
    route.update(timings)
    for sub in route.get("routes", []):
        sub.update({k: v for k, v in timings.items() if k in sub})
    receiver: dict[str, Any] = {"name": RELAY_RECEIVER}
    if webhook is not None:
        hook: dict[str, Any] = {"url": webhook.url, "send_resolved": True}
        if webhook.token_file is not None:
            hook["http_config"] = {"authorization": {"type": "Bearer",
                                                     "credentials_file": str(webhook.token_file)}}
        receiver["webhook_configs"] = [hook]
    config["receivers"] = [receiver]
    return config


def write_yaml(path: Path, data: Mapping[str, Any]) -> Path:
    """Write ``data`` as YAML (the files the binaries read)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(dict(data), sort_keys=False), encoding="utf-8")
    return path
