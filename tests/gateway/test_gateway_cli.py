"""``oximeter gateway`` settings: flags override the ``gateway:`` section, validated together."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from gateway.cli import configure, resolve_settings
from oximeter.errors import ConfigError


def _parse(config: Path | None, *flags: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    configure(parser)
    args = parser.parse_args(list(flags))
    args.config = str(config) if config else None
    return args


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ((), {"max_concurrency": 3, "max_queue": 7, "max_queue_wait_s": 5.0, "node": "n9"}),
        (("--max-queue", "100", "--node", "n2"), {"max_concurrency": 3, "max_queue": 100, "node": "n2"}),
        (
            ("--max-queue-wait", "0.5", "--first-byte-timeout", "2"),
            {"max_queue_wait_s": 0.5, "first_byte_timeout_s": 2.0},
        ),
        (("--model", "a", "--model", "b", "--no-warmup"), {"models": ("a", "b"), "warmup": False}),
    ],
)
def test_flags_override_config_section(
    tmp_path: Path, flags: tuple[str, ...], expected: dict[str, object]
) -> None:
    config = tmp_path / "oximeter.yaml"
    config.write_text("gateway:\n  max_concurrency: 3\n  max_queue: 7\n  node: n9\n")
    settings = resolve_settings(_parse(config, *flags))
    assert {key: getattr(settings, key) for key in expected} == expected


def test_invalid_flag_names_the_flag() -> None:
    with pytest.raises(ConfigError, match="--max-concurrency"):
        resolve_settings(_parse(None, "--max-concurrency", "0"))
