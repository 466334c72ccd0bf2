"""``oximeter config check`` fails on what would only fail later: a secret the file names but this
environment lacks or cannot read, an infinite or huge duration, a URL that is not one."""

from __future__ import annotations

from pathlib import Path

import pytest

from analyzer.service.analyze_cmd import AnalyzeConfig
from oximeter.cli import main
from oximeter.errors import ConfigError

SECRETS = """\
analyzer:
  prometheus: {bearer_token_env: CHECK_PROM_TOKEN}
reporter:
  digest: {prometheus_bearer_token_env: CHECK_DIGEST_TOKEN}
exporter:
  redis_url: redis://127.0.0.1:6379/0
  redis_password_env: CHECK_REDIS_PASSWORD
  queues: [{name: jobs, key: "q:jobs"}]
"""
ENVS = {"analyzer.prometheus.bearer_token_env": "CHECK_PROM_TOKEN",
        "reporter.digest.prometheus_bearer_token_env": "CHECK_DIGEST_TOKEN",
        "exporter.redis_password_env": "CHECK_REDIS_PASSWORD"}


def _check(tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    path = tmp_path / "oximeter.yaml"
    path.write_text(text, encoding="utf-8")
    code = main(["config", "check", str(path)])
    out = capsys.readouterr()
    assert "Traceback" not in out.err
    return code, out.out + out.err


def test_every_named_secret_set_is_ok(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    for env in ENVS.values():
        monkeypatch.setenv(env, "s3cret-value")
    assert _check(tmp_path, SECRETS, capsys) == (0, f"{tmp_path / 'oximeter.yaml'}: ok\n")


@pytest.mark.parametrize("key", ENVS)
@pytest.mark.parametrize("how", ["unset", "unreadable file"])
def test_an_unset_or_unreadable_secret_fails_naming_its_key(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        key: str, how: str) -> None:
    for env in ENVS.values():
        monkeypatch.setenv(env, "s3cret-value")
    monkeypatch.delenv(ENVS[key])
    if how == "unreadable file":
        monkeypatch.setenv(f"{ENVS[key]}_FILE", str(tmp_path / "missing"))
    code, text = _check(tmp_path, SECRETS, capsys)
    assert code == 1
    assert f"{key}: " in text and ENVS[key] in text
    assert "s3cret-value" not in text


def test_a_redis_without_a_password_says_so_with_an_empty_variable_name(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = SECRETS.split("exporter:")[1].replace("CHECK_REDIS_PASSWORD", '""')
    text = "exporter:" + text
    assert _check(tmp_path, text, capsys)[0] == 0


@pytest.mark.parametrize(("text", "key"), [
    ("incidents:\n  lookback_s: .inf\n", "incidents.lookback_s"),
    ("incidents:\n  resolve_after_s: 1e300\n", "incidents.resolve_after_s"),
    ("analyzer:\n  baseline:\n    lags_s: [86400, .inf]\n", "analyzer.baseline.lags_s[1]"),
    ("gateway:\n  header_timeout_s: .inf\n", "gateway.header_timeout_s"),
    ("analyzer:\n  prometheus:\n    url: not a url\n", "analyzer.prometheus.url"),
    ("reporter:\n  digest:\n    prometheus_url: ftp://prom\n", "reporter.digest.prometheus_url"),
])
def test_infinite_durations_and_malformed_urls_fail_naming_the_key(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, key: str) -> None:
    code, out = _check(tmp_path, text, capsys)
    assert code == 1
    assert f": {key}: expected " in out


def test_the_analyzer_refuses_an_infinite_lookback_at_start(tmp_path: Path) -> None:
    path = tmp_path / "oximeter.yaml"
    path.write_text("incidents:\n  lookback_s: .inf\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"incidents\.lookback_s: expected a duration"):
        AnalyzeConfig.load(str(path))


def test_a_webhook_url_that_is_not_one_fails_without_echoing_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHECK_CHAT_URL", "not a url")
    channels = "reporter:\n  channels:\n    chat: {type: webhook, url_env: CHECK_CHAT_URL}\n"
    code, out = _check(tmp_path, channels, capsys)
    assert code == 1
    assert "reporter.channels.chat.url_env: CHECK_CHAT_URL is not an http:// or https:// URL" in out
    assert "not a url" not in out


def test_the_exporter_reports_an_unreadable_redis_password_file(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "oximeter.yaml"
    path.write_text("exporter:\n  backend: sim\n  redis_url: redis://127.0.0.1:6379/0\n"
                    "  queues: [{name: jobs, key: 'q:jobs'}]\n", encoding="utf-8")
    monkeypatch.delenv("OXIMETER_REDIS_PASSWORD", raising=False)
    monkeypatch.setenv("OXIMETER_REDIS_PASSWORD_FILE", str(tmp_path / "missing"))
    code = main(["--config", str(path), "exporter", "--port", "0"])
    err = capsys.readouterr().err
    assert code == 2
    assert f"OXIMETER_REDIS_PASSWORD_FILE: cannot read {tmp_path / 'missing'}" in err
    assert "Traceback" not in err
