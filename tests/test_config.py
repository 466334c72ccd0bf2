"""Configuration: every problem names the file and the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from oximeter.cli import main
from oximeter.config import load_config
from oximeter.errors import ConfigError
from oximeter.secrets import read_secret


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "oximeter.yaml"
    path.write_text(text)
    return path


def test_defaults_are_safe(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, ""))
    assert cfg.gateway.host == "127.0.0.1"
    assert cfg.sim.host == "127.0.0.1"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("gateway:\n  max_queue: -1\n", "gateway.max_queue: Input should be greater than or equal to 0"),
        ("gateway:\n  max_concurency: 4\n", "gateway.max_concurency: unknown key"),
        ("sim:\n  nodes: many\n", "sim.nodes: Input should be a valid integer"),
        ("gatway: {}\n", "gatway: unknown key"),
        ("gateway: [1, 2\n", "invalid YAML"),
        ("- a\n- b\n", "<root>: expected a mapping"),
    ],
)
def test_errors_name_file_and_key(tmp_path: Path, text: str, expected: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert message.startswith(f"{path}: ")
    assert expected in message


def test_every_problem_is_reported(tmp_path: Path) -> None:
    path = write(tmp_path, "gateway:\n  max_queue: -1\n  port: 70000\nsim:\n  nodes: 0\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert len(info.value.problems) == 3


def test_config_check_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = write(tmp_path, "gateway:\n  max_queue: 8\n")
    assert main(["config", "check", str(good)]) == 0
    assert f"{good}: ok" in capsys.readouterr().out
    bad = write(tmp_path, "gateway:\n  max_queue: x\n")
    assert main(["config", "check", str(bad)]) == 1
    assert "gateway.max_queue" in capsys.readouterr().err


def test_errors_never_echo_secrets(tmp_path: Path) -> None:
    path = write(tmp_path, "gateway:\n  upstream: [1]\n  max_queue: x\nexporter:\n  redis_url: 5\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert "gateway.max_queue" in message and "(got 'x')" in message
    assert "gateway.upstream" in message and "[1]" not in message


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read file"):
        load_config(tmp_path / "nope.yaml")


def test_secret_from_env_or_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OXI_TEST_TOKEN", raising=False)
    assert read_secret("OXI_TEST_TOKEN") is None
    with pytest.raises(ConfigError, match="OXI_TEST_TOKEN is not set"):
        read_secret("OXI_TEST_TOKEN", required=True)
    secret_file = tmp_path / "token"
    secret_file.write_text("s3cret\n")
    monkeypatch.setenv("OXI_TEST_TOKEN_FILE", str(secret_file))
    token = read_secret("OXI_TEST_TOKEN")
    assert token is not None and token.get_secret_value() == "s3cret"
    assert "s3cret" not in repr(token)
    monkeypatch.setenv("OXI_TEST_TOKEN", "from-env")
    token = read_secret("OXI_TEST_TOKEN")
    assert token is not None and token.get_secret_value() == "from-env"


@pytest.mark.usefixtures("logs_to_stderr")
@pytest.mark.parametrize("command", [["config", "check"], ["analyze", "--once", "--replay", "none"]])
@pytest.mark.parametrize("content", [b"gateway:\n  port: 8080\n  # caf\xe9 in Latin-1\n",
                                     b"\xff\xfe\x00g\x00", b"sim:\n  start: 2026-02-30\n"])
def test_unreadable_config_names_the_file(tmp_path: Path, command: list[str], content: bytes,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "oximeter.yaml"
    path.write_bytes(content)
    argv = ["config", "check", str(path)] if command[0] == "config" else [
        "--config", str(path), *command, "--store", str(tmp_path / "oximeter.db")]
    code = main(argv)
    err = capsys.readouterr().err
    assert code in (1, 2)
    assert f"{path}: " in err and "Traceback" not in err and "UnicodeDecodeError" not in err


@pytest.mark.usefixtures("logs_to_stderr")
def test_a_missing_channel_secret_names_file_and_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "oximeter.yaml"
    path.write_text("reporter:\n  channels:\n"
                    "    ops: {type: dingtalk, url_env: OPS_URL, secret_env: OPS_SIGN}\n")
    monkeypatch.delenv("OPS_URL", raising=False)
    monkeypatch.delenv("OPS_SIGN", raising=False)
    assert main(["config", "check", str(path)]) == 1
    err = capsys.readouterr().err
    assert f"{path}: reporter.channels.ops.url_env: secret OPS_URL is not set" in err
    assert f"{path}: reporter.channels.ops.secret_env: secret OPS_SIGN is not set" in err
    monkeypatch.setenv("OPS_URL", "https://oapi.dingtalk.com/robot/send?access_token=x")
    monkeypatch.setenv("OPS_SIGN", "s3cret")
    assert main(["config", "check", str(path)]) == 0
    assert capsys.readouterr().out.strip() == f"{path}: ok"
    monkeypatch.delenv("OPS_SIGN")
    signals = tmp_path / "signals.csv"
    signals.write_text("timestamp,signal,node,value\n" + "".join(
        f"2026-03-02T09:{i // 4:02d}:{i % 4 * 15:02d}Z,xid_paging,n1,0\n" for i in range(20)))
    code = main(["--config", str(path), "analyze", "--once", "--signals", str(signals),
                 "--store", str(tmp_path / "oximeter.db")])
    assert code == 2
    assert f"{path}: reporter.channels.ops.secret_env: secret OPS_SIGN is not set" in capsys.readouterr().err
