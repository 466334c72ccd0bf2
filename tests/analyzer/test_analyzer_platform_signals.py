"""The platform signals read from Kubernetes (kube-state-metrics through its adapter's records):
a restart loop, a pod kept out of service and a node not Ready fire; one planned restart, a model
load after it and a node's reboot do not."""

from __future__ import annotations

import numpy as np
import pytest
from analyzer_frames import frame

from analyzer.detection.evaluate import evaluate_signal
from analyzer.service.settings import AnalyzerSettings
from analyzer.signals.catalogue import CATALOGUE
from analyzer.signals.frame import SeriesFrame
from analyzer.signals.stock_inputs import adapter_rules
from oximeter.promql import metric_names

POD = {"node": "n1", "namespace": "llm", "pod": "vllm-n1"}
QUIET = 60  # rows (minutes) of health before each case


def _series(healthy: float, episode: list[float]) -> np.ndarray:
    return np.array([healthy] * QUIET + episode + [healthy] * 30, dtype=float)


ROWS = [
    # signal, the recorded value minute by minute after QUIET healthy minutes, fires
    ("container_restarts", [1.0] * 5, False),  # one planned restart: +1 in 5 min, for 5 min
    ("container_restarts", [1.0, 1.0, 2.0, 2.0, 3.0, 2.0, 1.0], True),  # a loop
    ("pod_not_ready", [0.0] * 7, False),  # an engine loading its model after a restart
    ("pod_not_ready", [0.0] * 12, True),
    ("node_not_ready", [0.0] * 7, False),  # a planned reboot
    ("node_not_ready", [0.0] * 12, True),
]


@pytest.mark.parametrize(("signal", "episode", "fires"), ROWS)
def test_one_planned_restart_does_not_page(signal: str, episode: list[float], fires: bool) -> None:
    spec = CATALOGUE[signal]
    healthy = 0.0 if spec.kind == "counter_growth" else 1.0
    labels = {k: v for k, v in POD.items() if k in spec.entity_labels}
    key = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
    events = evaluate_signal(spec, SeriesFrame(frame({key: _series(healthy, episode)}), {key: labels}))
    assert bool(events) is fires
    assert all(e.layer == "platform" and dict(e.labels) == labels for e in events)


@pytest.mark.parametrize("signal", ["container_restarts", "pod_not_ready", "node_not_ready"])
def test_they_read_the_kubernetes_adapter_and_stock_inputs_feed_them(signal: str) -> None:
    kube_records = {r.record for r in adapter_rules() if any(i.startswith("kube_") for i in r.inputs)}
    assert metric_names(CATALOGUE[signal].promql) <= kube_records
    assert signal in AnalyzerSettings(inputs="stock").catalogue()
