"""The ``exporter:`` section: the same rules through the exporter's own loader and oximeter's."""

from __future__ import annotations

import re
from typing import Any

import pytest

from exporter.settings import ExporterSettings, QueueSpec
from oximeter.config import parse_config
from oximeter.errors import ConfigError

CASES: list[tuple[dict[str, Any], str]] = [
    ({"backend": "tpu"}, "backend: must be one of none, nvml, sim, got 'tpu'"),
    ({"port": 70000}, "port: must be between 0 and 65535, got 70000"),
    ({"naming": "nvidia"}, "naming: must be one of oximeter, dcgm"),
    ({"gpu_timeout_s": 0}, "gpu_timeout_s: must be > 0 and <= 60 seconds"),
    ({"sim_url": "127.0.0.1:8100"}, "sim_url: must start with http://"),
    ({"redis_url": "redis://:hunter2@127.0.0.1/0"},
     "redis_url: put the password in $OXIMETER_REDIS_PASSWORD"),
    ({"queues": [{"name": "q", "key": "k"}]}, "queues: need redis_url"),
    ({"redis_url": "redis://127.0.0.1/0", "queues": [{"name": "q", "key": "k", "kind": "set"}]},
     "kind: must be one of list, stream, got 'set'"),
    ({"redis_url": "redis://127.0.0.1/0", "queues": [{"name": "q", "key": "a"}, {"name": "q", "key": "b"}]},
     "queues: names must be unique"),
]


@pytest.mark.parametrize(("section", "message"), CASES, ids=[c[1][:30] for c in CASES])
def test_both_loaders_reject_with_the_key(section: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)) as own:
        ExporterSettings.from_mapping(section)
    assert "hunter2" not in str(own.value)
    with pytest.raises(ConfigError) as composed:
        parse_config({"exporter": section}, "oximeter.yaml")
    assert message in str(composed.value)
    assert "oximeter.yaml: exporter" in str(composed.value)


def test_unknown_keys_are_rejected() -> None:
    with pytest.raises(ValueError, match="prot: unknown key"):
        ExporterSettings.from_mapping({"prot": 1})
    with pytest.raises(ConfigError, match=r"exporter\.prot"):
        parse_config({"exporter": {"prot": 1}})


def test_defaults_are_safe_and_a_good_section_loads_the_same_both_ways() -> None:
    assert parse_config({}).exporter == ExporterSettings()
    assert ExporterSettings().host == "127.0.0.1"
    section = {"backend": "sim", "node": "n2", "port": 9500, "process_names": ["vllm", "ray"],
               "redis_url": "redis://127.0.0.1:6379/0", "queues": [{"name": "jobs", "key": "q:jobs"}]}
    own = ExporterSettings.from_mapping(section)
    assert own == parse_config({"exporter": section}).exporter
    assert own.queues == (QueueSpec(name="jobs", key="q:jobs", kind="list"),)
    assert own.process_names == ("vllm", "ray")
