"""The light components' settings dataclasses: the same types and bounds with and without pydantic."""

from __future__ import annotations

import dataclasses

import pytest

from gateway.settings import GatewaySettings
from oximeter.config import parse_config
from oximeter.errors import ConfigError
from oximeter.plain_settings import SettingError, from_mapping


@pytest.mark.parametrize(("section", "problem"), [
    ({"port": 70000}, "port: must be ≤ 65535"),
    ({"max_concurrency": 0}, "max_concurrency: must be ≥ 1"),
    ({"max_queue_wait_s": 0}, "max_queue_wait_s: must be > 0"),
    ({"max_body_bytes": 5}, "max_body_bytes: must be ≥ 1024"),
    ({"max_queue_wait_s": "5"}, "max_queue_wait_s: expected int or float, got str"),
    ({"warmup": 1}, "warmup: expected bool, got int"),
    ({"max_queue": True}, "max_queue: expected int, got bool"),
    ({"models": "a"}, "models: expected a list, got str"),
    ({"models": ["a", 1]}, r"models\[\]: expected str, got int"),
    ({"prot": 1}, "prot: unknown key"),
])
def test_invalid_values_name_their_key(section: dict[str, object], problem: str) -> None:
    with pytest.raises(SettingError, match=problem):
        from_mapping(GatewaySettings, section)


@pytest.mark.parametrize("section", [{"port": -1}, {"max_concurrency": 0}, {"max_queue_wait_s": 0},
                                     {"max_body_bytes": 5}, {"prot": 1}])
def test_config_check_refuses_what_the_gateway_refuses(section: dict[str, object]) -> None:
    # ``oximeter config check`` validates the same dataclass through pydantic, which reads the bounds
    # from the fields' metadata; both must refuse, naming the key.
    key = next(iter(section))
    with pytest.raises(ConfigError, match=f"gateway.{key}"):
        parse_config({"gateway": section})
    with pytest.raises(SettingError, match=key):
        from_mapping(GatewaySettings, section)


def test_valid_section_reads_the_same_both_ways() -> None:
    section = {"port": 0, "models": ["a", "b"], "max_queue_wait_s": 2, "warmup": False}
    own = from_mapping(GatewaySettings, section)
    assert own.models == ("a", "b") and own.max_queue_wait_s == 2 and own.port == 0
    assert dataclasses.asdict(parse_config({"gateway": section}).gateway) == dataclasses.asdict(own)
    assert from_mapping(GatewaySettings, None) == GatewaySettings()


def test_overrides_are_checked_too() -> None:
    with pytest.raises(SettingError, match="max_concurrency"):
        dataclasses.replace(GatewaySettings(), max_concurrency=0)
