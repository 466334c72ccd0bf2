"""The ``reporter:`` config section, channel construction from env/file secrets, ``outbox list``."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from oximeter.config import parse_config
from oximeter.errors import ConfigError, SecretMissingError
from oximeter.store import connect
from reporter.channels import build_channel
from reporter.channels.feishu import FeishuChannel
from reporter.outbox import Outbox
from reporter.settings import ChannelSettings
from stack.procs import oximeter_argv


def test_reporter_section_defaults_and_problems_named_by_key() -> None:
    config = parse_config({"reporter": {"channels": {"ops": {"type": "feishu", "url_env": "OPS_URL",
                                                             "secret_env": "OPS_SECRET"}}}})
    assert config.reporter.channels["ops"].type == "feishu"
    assert (config.reporter.storm_cap, config.reporter.store_path) == (10, "oximeter.db")
    with pytest.raises(ConfigError) as caught:
        parse_config({"reporter": {"channels": {"x": {"type": "teams", "url_env": "lower-case"}}}}, "o.yaml")
    text = str(caught.value)
    assert "o.yaml: reporter.channels.x.type" in text and "o.yaml: reporter.channels.x.url_env" in text


@pytest.mark.parametrize("key", ["slo_ttft_p99_s", "slo_availability"])
def test_the_digest_refuses_its_former_objectives_naming_the_file_the_key_and_the_section(key: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config({"reporter": {"digest": {key: 0.5}}}, "o.yaml")
    text = str(caught.value)
    assert text.startswith("o.yaml: reporter.digest: ")
    assert f"{key} is no longer read" in text and "slos.objectives[]" in text


def test_channel_secrets_come_from_env_or_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = ChannelSettings(type="feishu", url_env="OXI_T_URL", secret_env="OXI_T_SECRET")
    with pytest.raises(SecretMissingError, match="OXI_T_URL"):
        build_channel("ops", settings)
    secret_file = tmp_path / "secret"
    secret_file.write_text("file-secret\n")
    monkeypatch.setenv("OXI_T_URL", "https://open.feishu.cn/open-apis/bot/v2/hook/tok-123456789")
    monkeypatch.setenv("OXI_T_SECRET_FILE", str(secret_file))
    channel = build_channel("ops", settings)
    assert isinstance(channel, FeishuChannel)
    assert channel.secret_value() == "file-secret"
    assert repr(channel) == "FeishuChannel(name='ops', url='https://open.feishu.cn/open-apis/bot/v2/hook/***')"


def test_outbox_list_on_a_missing_then_an_empty_store(tmp_path: Path) -> None:
    store = tmp_path / "oximeter.db"
    config = tmp_path / "oximeter.yaml"
    config.write_text(yaml.safe_dump({"reporter": {"store_path": str(store)}}))
    argv = oximeter_argv("--config", str(config), "outbox", "list")
    missing = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=True)
    assert (missing.stdout, store.exists()) == (f"outbox: no store at {store}\n", False)
    Outbox(connect(store))
    empty = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=True)
    assert empty.stdout == "outbox: nothing pending/delivering/failed\n"
