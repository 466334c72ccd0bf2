"""The signal catalogue: recording rules exist, raw fallbacks are valid PromQL, overrides work;
and the event's JSON form."""

from __future__ import annotations

import json
import math
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from analyzer.detection.events import AnomalyEvent
from analyzer.detection.judges import detectors_of, persistence_of
from analyzer.service.settings import AnalyzerSettings
from analyzer.signals.catalogue import CATALOGUE, KIND_DEFAULTS, build_catalogue
from oximeter.config import parse_config
from oximeter.errors import ConfigError

RULES = Path(__file__).resolve().parents[2] / "alert_rules"


def recorded_names() -> set[str]:
    names: set[str] = set()
    for path in RULES.glob("*.rules.yml"):
        for group in (yaml.safe_load(path.read_text()) or {}).get("groups", []):
            names |= {r["record"] for r in group.get("rules", []) if "record" in r}
    return names


def test_every_recording_rule_a_signal_prefers_exists() -> None:
    names = recorded_names()
    assert names, "alert_rules/ defines no recording rules"
    missing = sorted(s.record for s in CATALOGUE.values() if s.record and s.record not in names)
    assert missing == []


def test_every_raw_fallback_is_valid_promql(tmp_path: Path) -> None:
    rules = []
    for spec in CATALOGUE.values():
        rules.append({"record": f"check:{spec.name}:raw", "expr": spec.promql})
        if spec.min_traffic is not None:
            rules.append({"record": f"check:{spec.name}:guard", "expr": spec.min_traffic.promql})
    path = tmp_path / "fallbacks.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "fallbacks", "rules": rules}]}))
    result = subprocess.run(["promtool", "check", "rules", str(path)], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_signal_has_detectors_and_a_persistence() -> None:
    for spec in [*CATALOGUE.values(), *KIND_DEFAULTS.values()]:
        assert detectors_of(spec), spec.name
        assert persistence_of(spec, 15.0).n >= spec.min_samples


@pytest.mark.parametrize(("name", "threshold", "for_s", "layer"), [
    ("gpu_temperature", 85.0, 60.0, "infrastructure"),
    ("queue_length", 20.0, 60.0, "scheduling"),
    ("queue_limit_ratio", 0.9, 60.0, "scheduling"),
    ("queue_wait_p99", 1.0, 600.0, "scheduling"),  # 5-min p99 window + 5 min for
    ("error_504_ratio", 0.01, 60.0, "ingress"),
    ("kv_cache_usage", 0.95, 300.0, "engine"),
    ("gpu_utilization_p95", 0.95, 300.0, "infrastructure"),
])
def test_seed_thresholds(name: str, threshold: float, for_s: float, layer: str) -> None:
    spec = CATALOGUE[name]
    assert (spec.threshold, spec.for_s, spec.layer) == (threshold, for_s, layer)


def test_504_needs_twenty_requests_and_ecc_needs_a_hundred() -> None:
    guard = CATALOGUE["error_504_ratio"].min_traffic
    assert guard is not None and guard.minimum == 20
    ecc = CATALOGUE["ecc_corrected_increase"]
    assert (ecc.increase, ecc.ratio) == (100, 100)


def test_config_overrides_and_extends_the_catalogue() -> None:
    config = parse_config({"analyzer": {
        "signals": {"gpu_temperature": {"threshold": 80},
                    "vector_db_p99": {"layer": "dependency", "kind": "latency", "ratio": 2.0,
                                      "promql": "histogram_quantile(0.99, rate(vdb_seconds_bucket[5m]))"}},
        "disabled_signals": ["target_down"],
    }})
    catalogue = config.analyzer.catalogue()
    assert catalogue["gpu_temperature"].threshold == 80
    assert catalogue["gpu_temperature"].layer == "infrastructure"
    assert catalogue["vector_db_p99"].ratio == 2.0
    assert "target_down" not in catalogue
    assert len(AnalyzerSettings().catalogue()) == len(CATALOGUE)


def test_bad_override_names_the_key() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config({"analyzer": {"signals": {"gpu_temperature": {"threshold": "hot"},
                                               "mine": {"kind": "latency"}}}}, "cfg.yaml")
    text = str(info.value)
    assert "cfg.yaml" in text and "analyzer.signals.gpu_temperature.threshold" in text
    assert "analyzer.signals.mine.layer" in text
    with pytest.raises(ConfigError, match="unknown_field"):
        build_catalogue({"gpu_temperature": {"unknown_field": 1}})
    # Widening a judgement over earlier windows needs a ratio whose guard counts its requests.
    with pytest.raises(ConfigError, match="widen_s needs a ratio"):
        build_catalogue({"gpu_temperature": {"widen_s": 600}})
    assert build_catalogue({"retry_ratio": {"widen_s": 1800}})["retry_ratio"].widen_s == 1800


def test_event_json_round_trip() -> None:
    event = AnomalyEvent(
        signal="queue_wait_p99", layer="scheduling",
        labels=AnomalyEvent.labels_from({"service": "chat", "node": "n1"}),
        onset=datetime(2026, 1, 1, 10, 0, tzinfo=UTC),
        detected_at=datetime(2026, 1, 1, 10, 2, 30, tzinfo=UTC),
        cleared_at=None, value=4.8, baseline=0.79, score=6.1, reason="x", detector="baseline_ratio")
    record = json.loads(event.to_json())
    assert record["onset"] == "2026-01-01T10:00:00Z"
    assert record["detected_at"] == "2026-01-01T10:02:30Z"
    assert record["cleared_at"] is None and record["labels"] == {"node": "n1", "service": "chat"}
    assert AnomalyEvent.from_json(event.to_json()) == event


def test_event_json_has_no_nan() -> None:
    event = AnomalyEvent(signal="gpu_series_vanished", layer="platform", labels=(),
                         onset=datetime(2026, 1, 1), detected_at=datetime(2026, 1, 1), cleared_at=None,
                         value=math.nan, baseline=None, score=math.inf, reason="series stopped reporting")
    record = json.loads(event.to_json())
    assert record["value"] is None and record["score"] is None and record["onset"] == "2026-01-01T00:00:00Z"
