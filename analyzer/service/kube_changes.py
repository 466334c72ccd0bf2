"""Platform changes read from the telemetry, recorded as change events with no POST needed.

A container restart (its restart count rising), a rollout (a deployment's spec generation rising)
— both from kube-state-metrics — and an engine's process restarted (vLLM's own process start time
rising, whatever restarted it: Kubernetes, systemd, a supervisor) are what an operator would
otherwise declare through ``POST /api/changes``: each becomes a ``ChangeEvent`` that incidents list
under their changes. Restarts carry their node, so they attach to incidents on that node; a rollout
has no single node and attaches to any incident of its time, as an unlabelled declared change does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

import pandas as pd

from analyzer.incidents.model import ChangeEvent
from analyzer.incidents.store import IncidentStore
from analyzer.signals.sources.base import Source
from analyzer.signals.spec import SignalSpec

SOURCE = "kubernetes"
# How far back the first poll looks (an analyzer started just after a restart still records it).
FIRST_LOOKBACK_S = 600.0


@dataclass(frozen=True)
class ChangeFeed:
    """A level per entity whose every rise is one change of ``kind``."""

    kind: str
    spec: SignalSpec
    describe: Callable[[Mapping[str, str], float, float], str]  # (labels, before, after)
    keep_labels: bool  # restarts name their node; a rollout's pods may be on any
    source: str = SOURCE  # who told of it


def _restart(labels: Mapping[str, str], before: float, after: float) -> str:
    count = int(after - before)
    times = "once" if count == 1 else f"{count} times"
    return f"pod {labels.get('namespace', '?')}/{labels.get('pod', '?')} on {labels.get('node', '?')}: " \
           f"container restarted {times}"


def _rollout(labels: Mapping[str, str], before: float, after: float) -> str:
    return f"deployment {labels.get('namespace', '?')}/{labels.get('deployment', '?')} rolled out " \
           f"(generation {int(before)} to {int(after)})"


def _engine_restart(labels: Mapping[str, str], before: float, after: float) -> str:
    return f"engine {labels.get('instance', '?')} on {labels.get('node', '?')}: process restarted"


FEEDS: tuple[ChangeFeed, ...] = (
    ChangeFeed("restart", SignalSpec(
        name="kube_pod_container_restarts", layer="platform", kind="gauge",
        promql="max by (node, namespace, pod) ("
               "sum by (namespace, pod) (kube_pod_container_status_restarts_total)"
               " * on (namespace, pod) group_left (node) max by (namespace, pod, node) (kube_pod_info))",
        entity_labels=("node", "namespace", "pod")), _restart, keep_labels=True),
    ChangeFeed("deploy", SignalSpec(
        name="kube_deployment_generation", layer="platform", kind="gauge",
        promql="max by (namespace, deployment) (kube_deployment_metadata_generation)",
        entity_labels=("namespace", "deployment")), _rollout, keep_labels=False),
)
# The start time of each process that serves vLLM's series (its API server): a new process starts
# later than the one it replaces. On every input: vLLM is scraped on Oximeter's telemetry too.
ENGINE_RESTARTS = ChangeFeed("restart", SignalSpec(
    name="vllm_process_start", layer="platform", kind="gauge",
    promql="max by (node, instance) (process_start_time_seconds and on (instance, job) "
           "group by (instance, job) (vllm:num_requests_running))",
    entity_labels=("node", "instance")), _engine_restart, keep_labels=True, source="vllm")


def rises(values: pd.Series) -> list[tuple[pd.Timestamp, float, float]]:
    """(time, before, after) wherever the level rose from its previous known value. A fall (a pod
    recreated, its count back at 0) is no change; the rise after it is."""
    known = values.dropna()
    steps = known.diff()
    return [(t, float(known.iloc[i - 1]), float(known.iloc[i]))
            for i, (t, d) in enumerate(steps.items()) if i > 0 and d > 0]


class KubeChangePoller:
    """Each ``poll(now)`` records the changes since the previous poll into ``store``."""

    def __init__(self, source: Source, store: IncidentStore, step_s: float,
                 feeds: Sequence[ChangeFeed] = FEEDS) -> None:
        self.source, self.store, self.step_s, self.feeds = source, store, step_s, feeds
        self.since: datetime | None = None

    def poll(self, now: datetime) -> list[ChangeEvent]:
        """The new change events (also stored); the same change is never recorded twice."""
        since = self.since or now - timedelta(seconds=FIRST_LOOKBACK_S)
        # One step before ``since``, so that a rise landing on its first point has a before.
        start = since - timedelta(seconds=self.step_s)
        known = {(c.at, c.kind, c.description) for c in self.store.change_events(since, now)}
        found = []
        for feed in self.feeds:
            frame = self.source.fetch(feed.spec, start, now, self.step_s)
            for column in frame.values.columns:
                labels = frame.labels_of(column)
                for t, before, after in rises(frame.values[column]):
                    at = t.to_pydatetime()
                    kept = tuple(sorted(labels.items())) if feed.keep_labels else ()
                    said = feed.describe(labels, before, after)
                    event = ChangeEvent(at, feed.kind, said, kept, feed.source)
                    if since < at <= now and (at, event.kind, event.description) not in known:
                        found.append(event)
        for event in found:
            self.store.record_change_event(event, now)
        self.since = now
        return found
