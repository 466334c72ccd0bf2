"""Chat buttons: a Slack interactivity callback and a Feishu card callback, each signed as the
platform signs it, acknowledge an incident on the analyzer's API; a wrongly signed one gets 401.

Fixtures, from the platforms' own material:
- Slack's signing example (secret, timestamp, slash-command body, signature) from "Verifying
  requests from Slack" (https://docs.slack.dev/authentication/verifying-requests-from-slack), as
  slackapi/python-slack-sdk tests/slack_sdk/signature/test_signature_verifier.py carries it
  (commit 6337ddda4f839f5124459860fff2c3ce7f32bcd6).
- The ``block_actions`` payload's shape (user, actions[].action_id/value, form-encoded as
  ``payload=``) from slackapi/bolt-python tests/scenario_tests/test_block_actions.py (commit
  b8c70d2a98864b434239efaa37f6a7044f99c5c6).
- Feishu's card-callback signature, SHA-1 hex of timestamp + nonce + verification token + raw
  body, from larksuite/oapi-sdk-python lark_oapi/card/action_handler.py ``_verify_sign`` (commit
  3af49d526efef37817e7ca173c409fcb2412258f); the card action's fields (open_id, user_id,
  open_message_id, tenant_key, token, action.value/tag) from larksuite/oapi-sdk-go card/card_test.go
  (commit eb67f65d9b1221ecb2dc20bd2806b66e1572b36c). Feishu publishes no fixed signature vector:
  the expected signature below is the documented formula applied to these bytes.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from urllib.parse import quote

import pytest
import requests
from api_server import ApiServer
from pydantic import SecretStr

from analyzer.diagnosis.topology import Topology
from analyzer.incidents.lifecycle import IncidentSettings, IncidentTracker, findings
from analyzer.incidents.store import IncidentStore
from analyzer.service.api import build_app
from oximeter.store import connect
from reporter import callbacks
from reporter.callbacks import RefusedError, slack_signature, verify_slack
from reporter.channels.slack import SlackChannel
from reporter.render import render_change
from reporter.settings import ReporterSettings
from tests.incidents.incident_cases import at, ev

SLACK_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
SLACK_TIMESTAMP = "1531420618"
SLACK_BODY = ("token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V"
              "&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text="
              "&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIG"
              "lgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c")
SLACK_SIGNATURE = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503"
FEISHU_TOKEN = "121"
NOW_S = float(SLACK_TIMESTAMP)


def test_slacks_documented_signature_is_reproduced() -> None:
    assert slack_signature(SLACK_SECRET, SLACK_TIMESTAMP, SLACK_BODY.encode()) == SLACK_SIGNATURE
    headers = {"X-Slack-Request-Timestamp": SLACK_TIMESTAMP, "X-Slack-Signature": SLACK_SIGNATURE}
    verify_slack(SLACK_SECRET, headers, SLACK_BODY.encode(), NOW_S + 299)
    for body, now_s, reason in ((SLACK_BODY.encode() + b"&", NOW_S, "bad Slack signature"),
                                (SLACK_BODY.encode(), NOW_S + 301, "outside the five-minute window")):
        with pytest.raises(RefusedError, match=reason):
            verify_slack(SLACK_SECRET, headers, body, now_s)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[IncidentStore]:
    s = IncidentStore(connect(tmp_path / "s.db"))
    tracker = IncidentTracker(IncidentSettings())
    event = ev("xid_paging", 1, 0, node="n1", gpu="3", xid="79")
    changes, touched = tracker.step(findings([event], Topology(), now=at(2)), at(2))
    s.save(touched, changes)
    yield s
    s.conn.close()


@pytest.fixture
def api(store: IncidentStore) -> Iterator[ApiServer]:
    app = build_app(store, None, clock=lambda: at(3))
    callbacks.mount(app, callbacks.ChatCallbacks(store, SecretStr(SLACK_SECRET), SecretStr(FEISHU_TOKEN),
                                                 clock=lambda: at(3), wall_s=lambda: NOW_S))
    server = ApiServer(app)
    yield server
    server.stop()


def _incident_id(store: IncidentStore) -> str:
    (row,) = store.conn.execute("SELECT id FROM incidents").fetchall()
    return str(row["id"])


def slack_press(incident_id: str, action_id: str = "oximeter_ack") -> bytes:
    """A ``block_actions`` body as Slack posts it when the incident's button is pressed."""
    user = {"id": "W111", "username": "primary-owner", "name": "primary-owner", "team_id": "T111"}
    payload = {"type": "block_actions", "user": user,
               "api_app_id": "A111", "token": "verification_token", "trigger_id": "111.222.valid",
               "container": {"type": "message", "message_ts": "111.222", "channel_id": "C111"},
               "actions": [{"action_id": action_id, "block_id": "b", "value": incident_id, "type": "button",
                            "text": {"type": "plain_text", "text": "Acknowledge"},
                            "action_ts": "1596530385.194939"}]}
    return f"payload={quote(json.dumps(payload))}".encode()


def test_a_signed_slack_button_acknowledges_and_a_forged_one_gets_401(api: ApiServer,
                                                                       store: IncidentStore) -> None:
    inc = _incident_id(store)
    # The button Oximeter's Slack message carries for this incident is the one pressed.
    incident = store.get(inc)
    assert incident is not None
    message = render_change(store.pending_changes()[0], incident, ReporterSettings())
    slack = SlackChannel("slack", SecretStr("https://hooks.slack.com/services/T/B/X"))
    (buttons,) = [b["elements"] for b in slack.payloads(message)[0]["blocks"] if b["type"] == "actions"]
    pressable = [(b["action_id"], b["value"]) for b in buttons]
    assert pressable == [("oximeter_ack", inc), ("oximeter_silence", inc)]
    url, body = api.url("/api/chat/slack/actions"), slack_press(inc, buttons[0]["action_id"])
    forged = {"X-Slack-Request-Timestamp": SLACK_TIMESTAMP,
              "X-Slack-Signature": slack_signature("not-the-secret", SLACK_TIMESTAMP, body)}
    refused = requests.post(url, data=body, headers=forged, timeout=30)
    assert (refused.status_code, refused.json()) == (401, {"error": "bad Slack signature"})
    assert store.annotations_of(inc)["acks"] == []
    stale = str(int(NOW_S) - 301)
    old = requests.post(url, data=body, timeout=30, headers={
        "X-Slack-Request-Timestamp": stale, "X-Slack-Signature": slack_signature(SLACK_SECRET, stale, body)})
    assert old.status_code == 401
    signed = {"X-Slack-Request-Timestamp": SLACK_TIMESTAMP,
              "X-Slack-Signature": slack_signature(SLACK_SECRET, SLACK_TIMESTAMP, body),
              "Content-Type": "application/x-www-form-urlencoded"}
    done = requests.post(url, data=body, headers=signed, timeout=30)
    assert done.status_code == 200
    assert done.json()["done"] == [{"action": "ack", "incident": inc, "by": "slack:primary-owner"}]
    assert store.annotations_of(inc)["acks"] == [
        {"at": "2026-03-02T10:03:00Z", "by": "slack:primary-owner", "note": "from Slack"}]


def feishu_press(incident_id: str, token: str = FEISHU_TOKEN) -> bytes:
    """A card action body as Feishu posts it when the card's button is pressed."""
    return json.dumps({"open_id": "ou_sdfimx9948345", "user_id": "eu_sd923r0sdf5",
                       "open_message_id": "om_abcdefg1234567890", "tenant_key": "d32004232", "token": token,
                       "action": {"value": {"oximeter": "ack", "incident": incident_id}, "tag": "button"}}
                      ).encode()


def feishu_headers(body: bytes, token: str = FEISHU_TOKEN, timestamp: str = SLACK_TIMESTAMP
                   ) -> dict[str, str]:
    nonce = "nonce"
    signature = hashlib.sha1((timestamp + nonce + token).encode() + body).hexdigest()
    return {"X-Lark-Request-Timestamp": timestamp, "X-Lark-Request-Nonce": nonce,
            "X-Lark-Signature": signature}


def test_a_signed_feishu_card_callback_acknowledges_and_a_forged_one_gets_401(api: ApiServer,
                                                                              store: IncidentStore) -> None:
    inc, url = _incident_id(store), api.url("/api/chat/feishu/card")
    check = {"challenge": "121212", "token": FEISHU_TOKEN, "type": "url_verification"}
    challenge = requests.post(url, json=check, timeout=30)
    assert challenge.json() == {"challenge": "121212"}
    wrong_token = requests.post(url, json={**check, "token": "12"}, timeout=30)
    assert wrong_token.status_code == 401
    body = feishu_press(inc)
    forged = requests.post(url, data=body, headers=feishu_headers(body, token="12"), timeout=30)
    assert (forged.status_code, forged.json()) == (401, {"error": "bad Feishu signature"})
    assert store.annotations_of(inc)["acks"] == []
    done = requests.post(url, data=body, headers=feishu_headers(body), timeout=30)
    assert done.status_code == 200
    assert done.json()["done"] == [{"action": "ack", "incident": inc, "by": "feishu:eu_sd923r0sdf5"}]
    assert [a["by"] for a in store.annotations_of(inc)["acks"]] == ["feishu:eu_sd923r0sdf5"]


def test_unconfigured_platforms_are_refused(store: IncidentStore) -> None:
    app = build_app(store, None, clock=lambda: at(3))
    callbacks.mount(app, callbacks.ChatCallbacks(store, None, None, clock=lambda: at(3)))
    server = ApiServer(app)
    try:
        for path, name in (("/api/chat/slack/actions", "OXIMETER_SLACK_SIGNING_SECRET"),
                           ("/api/chat/feishu/card", "OXIMETER_FEISHU_VERIFICATION_TOKEN")):
            refused = requests.post(server.url(path), data=b"{}", timeout=30)
            assert refused.status_code == 403 and name in refused.json()["error"]
    finally:
        server.stop()


def test_a_silence_button_silences_for_an_hour(api: ApiServer, store: IncidentStore) -> None:
    inc = _incident_id(store)
    body = slack_press(inc, "oximeter_silence")
    headers = {"X-Slack-Request-Timestamp": SLACK_TIMESTAMP,
               "X-Slack-Signature": slack_signature(SLACK_SECRET, SLACK_TIMESTAMP, body)}
    assert requests.post(api.url("/api/chat/slack/actions"), data=body, headers=headers, timeout=30).ok
    (silence,) = store.annotations_of(inc)["silences"]
    assert silence["until"] == (at(3) + timedelta(hours=1)).isoformat().replace("+00:00", "Z")
