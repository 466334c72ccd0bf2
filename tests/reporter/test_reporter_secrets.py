"""Webhook keys and signing secrets never reach logs, errors, reprs or ``outbox list``."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from chat_receiver import (
    DINGTALK_TOKEN,
    FEISHU_TOKEN,
    SECRETS,
    SLACK_PATH,
    WEBHOOK_TOKEN,
    WECOM_KEY,
    ChatReceiver,
)
from loguru import logger
from pydantic import SecretStr
from sample_messages import alert

from oximeter.store import connect
from reporter.channels import CHANNELS, Channel
from reporter.outbox import Outbox, OutboxPolicy
from reporter.redact import redact_url
from stack.procs import oximeter_argv

SECRET_TEXTS = [WECOM_KEY, FEISHU_TOKEN, DINGTALK_TOKEN, *SLACK_PATH.split("/"), WEBHOOK_TOKEN,
                *SECRETS.values()]


def _leaks(text: str) -> list[str]:
    return [secret for secret in SECRET_TEXTS if secret in text]


@pytest.mark.parametrize(("url", "shown"), [
    (f"https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key={WECOM_KEY}",
     "https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=***"),
    (f"https://open.feishu.cn/open-apis/bot/v2/hook/{FEISHU_TOKEN}", "https://open.feishu.cn/open-apis/bot/v2/hook/***"),
    (f"https://oapi.dingtalk.com/robot/send?access_token={DINGTALK_TOKEN}",
     "https://oapi.dingtalk.com/robot/send?access_token=***"),
    (f"https://hooks.slack.com/services/{SLACK_PATH}", "https://hooks.slack.com/services/***/***/***"),
    ("http://127.0.0.1:9/hooks/abc?token=x&sig=y", "http://127.0.0.1:9/hooks/***?token=***&sig=***"),
])
def test_redact_url(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def _channels(receiver: ChatReceiver) -> dict[str, Channel]:
    return {service: cls(service, SecretStr(receiver.url(service)),
                         SecretStr(SECRETS[service]) if service in SECRETS else None)
            for service, cls in CHANNELS.items()}


def test_no_secret_in_errors_reprs_logs_or_outbox_list(tmp_path: Path) -> None:
    down = ChatReceiver()  # bound, never listening: refused, and the error text would carry the URL
    up = ChatReceiver().start()
    up.secrets.update(feishu="other", dingtalk="other", webhook="other")  # signatures refused
    for service in ("wecom", "slack"):
        up.script(service, "permanent")
    records: list[str] = []
    sink = logger.add(lambda message: records.append(str(message)), level="DEBUG", serialize=True)
    try:
        store = tmp_path / "oximeter.db"
        for receiver in (down, up):
            channels = _channels(receiver)
            text = " ".join(repr(c) + str(c) for c in channels.values())
            assert _leaks(text) == []
            outbox = Outbox(connect(store), channels, OutboxPolicy(max_attempts=1))
            outbox.enqueue(alert(f"k-{receiver.port}"), now=time.time())
            outbox.deliver_due(time.time())
    finally:
        logger.remove(sink)
        up.stop()
        down.stop()
    errors = [row.last_error or "" for row in outbox.rows()]
    assert len(errors) == 10 and all(errors)
    assert any("ConnectionError" in e for e in errors) and any("19021" in e for e in errors)
    assert _leaks("\n".join(errors)) == []
    assert records and _leaks("\n".join(records)) == []

    config = tmp_path / "oximeter.yaml"
    config.write_text(yaml.safe_dump({"reporter": {"store_path": str(store)}}))
    for extra in ([], ["--json"]):
        listing = subprocess.run(oximeter_argv("--config", str(config), "outbox", "list", *extra),
                                 capture_output=True, text=True, timeout=120, check=True)
        assert "failed" in listing.stdout and _leaks(listing.stdout + listing.stderr) == []
    rows = json.loads(listing.stdout)
    assert sorted(row["channel"] for row in rows) == sorted(list(CHANNELS) * 2)
