"""Buttons pressed in chat, verified as each platform signs them, acknowledge or silence an incident.

Mounted on the analyzer's API beside the Alertmanager relay:

- ``POST /api/chat/slack/actions``: Slack interactivity (a ``block_actions`` payload, form-encoded).
  Slack signs ``v0:{X-Slack-Request-Timestamp}:{raw body}`` with HMAC-SHA256 keyed by the app's
  signing secret and sends ``v0=<hex>`` as ``X-Slack-Signature``; a timestamp more than five
  minutes from our clock is refused, so a captured request cannot be replayed.
- ``POST /api/chat/feishu/card``: Feishu (Lark) card callbacks. Feishu signs
  ``{X-Lark-Request-Timestamp}{X-Lark-Request-Nonce}{verification token}{raw body}`` with SHA-1
  (hex, as ``X-Lark-Signature``) and puts the token in the body; the URL check
  (``url_verification``) carries the token alone and is answered with its challenge.

A wrong signature, token or stale timestamp is refused with 401; a platform whose secret is not
configured (``OXIMETER_SLACK_SIGNING_SECRET``, ``OXIMETER_FEISHU_VERIFICATION_TOKEN``, or their
``_FILE`` forms) with 403. Who pressed the button is logged and recorded as the ack's author.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import parse_qs

from aiohttp import web
from loguru import logger
from pydantic import SecretStr

from analyzer.incidents.oncall import DEFAULT_SILENCE_S
from analyzer.incidents.store import IncidentStore

# How far a signed request's timestamp may be from our clock (Slack's own verifier allows 5 min).
REPLAY_WINDOW_S = 300.0
# What a button may ask for (a silence lasts the default length).
ACTIONS = ("ack", "silence")


class RefusedError(Exception):
    """A callback that does not verify; ``status`` is the HTTP answer."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


def slack_signature(secret: str, timestamp: str, body: bytes) -> str:
    """``v0=<hex>``: HMAC-SHA256 of ``v0:{timestamp}:{body}`` keyed by the signing secret."""
    base = b"v0:" + timestamp.encode() + b":" + body
    return "v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()


def feishu_signature(token: str, timestamp: str, nonce: str, body: bytes) -> str:
    """SHA-1 hex of ``{timestamp}{nonce}{verification token}`` followed by the raw body."""
    return hashlib.sha1((timestamp + nonce + token).encode() + body).hexdigest()


def _fresh(timestamp: str | None, now_s: float) -> str:
    if not timestamp or not timestamp.isdigit() or len(timestamp) > 12:
        raise RefusedError(401, "missing or malformed request timestamp")
    if abs(now_s - int(timestamp)) > REPLAY_WINDOW_S:
        raise RefusedError(401, "request timestamp outside the five-minute window")
    return timestamp


def verify_slack(secret: str, headers: Mapping[str, str], body: bytes, now_s: float) -> None:
    """Raise :class:`RefusedError` unless ``body`` carries Slack's signature, made within the window."""
    timestamp = _fresh(headers.get("X-Slack-Request-Timestamp"), now_s)
    expected = slack_signature(secret, timestamp, body)
    if not hmac.compare_digest(expected, headers.get("X-Slack-Signature", "")):
        raise RefusedError(401, "bad Slack signature")


def verify_feishu(token: str, headers: Mapping[str, str], body: bytes, now_s: float) -> None:
    """Raise :class:`RefusedError` unless ``body`` carries Feishu's signature, made within the window."""
    timestamp = _fresh(headers.get("X-Lark-Request-Timestamp"), now_s)
    nonce = headers.get("X-Lark-Request-Nonce", "")
    expected = feishu_signature(token, timestamp, nonce, body)
    if not hmac.compare_digest(expected, headers.get("X-Lark-Signature", "")):
        raise RefusedError(401, "bad Feishu signature")


def slack_actions(body: bytes) -> tuple[str, list[tuple[str, str]]]:
    """Who pressed and the (verb, incident id) of each Oximeter button in a ``block_actions`` body."""
    try:
        payload = json.loads(parse_qs(body.decode(), strict_parsing=True)["payload"][0])
        user = payload.get("user") or {}
        who = str(user.get("username") or user.get("name") or user.get("id") or "unknown")
        pressed = [(str(a["action_id"]).removeprefix("oximeter_"), str(a["value"]))
                   for a in payload.get("actions") or ()
                   if str(a.get("action_id", "")).startswith("oximeter_")]
    except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError):
        raise RefusedError(400, "not a Slack block_actions payload") from None
    return f"slack:{who}", pressed


def feishu_actions(data: Mapping[str, Any]) -> tuple[str, list[tuple[str, str]]]:
    """Who pressed and the (verb, incident id) of an Oximeter card button."""
    value = (data.get("action") or {}).get("value") or {}
    if not isinstance(value, dict) or "oximeter" not in value:
        return "", []
    who = str(data.get("user_id") or data.get("open_id") or "unknown")
    return f"feishu:{who}", [(str(value["oximeter"]), str(value.get("incident", "")))]


class ChatCallbacks:
    """The two routes, with the secrets they check and the store they write."""

    def __init__(self, store: IncidentStore, slack_secret: SecretStr | None, feishu_token: SecretStr | None,
                 clock: Callable[[], datetime], wall_s: Callable[[], float] = time.time) -> None:
        self.store, self.clock, self.wall_s = store, clock, wall_s
        self.slack_secret, self.feishu_token = slack_secret, feishu_token

    def _apply(self, platform: str, who: str, pressed: list[tuple[str, str]]) -> web.Response:
        now, done = self.clock(), []
        for verb, incident_id in pressed:
            if verb not in ACTIONS:
                raise RefusedError(400, f"unknown action {verb!r}")
            note = f"from {platform}"
            until = now + timedelta(seconds=DEFAULT_SILENCE_S)
            ok = (self.store.ack(incident_id, who, note, now) if verb == "ack"
                  else self.store.silence(incident_id, until, who, note, now))
            if not ok:
                raise RefusedError(404, f"no incident {incident_id!r}")
            logger.info("{}: {} {} incident {}", platform, who,
                        "acknowledged" if verb == "ack" else "silenced", incident_id)
            done.append({"action": verb, "incident": incident_id, "by": who})
        return web.json_response({"ok": True, "done": done})

    async def slack(self, request: web.Request) -> web.Response:
        """``POST /api/chat/slack/actions``."""
        if self.slack_secret is None:
            return web.json_response({"error": "Slack callbacks are disabled: "
                                               "OXIMETER_SLACK_SIGNING_SECRET is not set"}, status=403)
        body = await request.read()
        try:
            verify_slack(self.slack_secret.get_secret_value(), request.headers, body, self.wall_s())
            who, pressed = slack_actions(body)
            return self._apply("Slack", who, pressed)
        except RefusedError as exc:
            logger.warning("slack callback refused: {}", exc)
            return web.json_response({"error": str(exc)}, status=exc.status)

    async def feishu(self, request: web.Request) -> web.Response:
        """``POST /api/chat/feishu/card``."""
        if self.feishu_token is None:
            return web.json_response({"error": "Feishu callbacks are disabled: "
                                               "OXIMETER_FEISHU_VERIFICATION_TOKEN is not set"}, status=403)
        token, body = self.feishu_token.get_secret_value(), await request.read()
        try:
            try:
                data = json.loads(body)
            except (ValueError, UnicodeDecodeError):
                raise RefusedError(400, "body: expected a JSON object") from None
            if not isinstance(data, dict):
                raise RefusedError(400, "body: expected a JSON object")
            if not hmac.compare_digest(str(data.get("token", "")), token):
                raise RefusedError(401, "bad Feishu verification token")
            if data.get("type") == "url_verification":
                return web.json_response({"challenge": str(data.get("challenge", ""))})
            verify_feishu(token, request.headers, body, self.wall_s())
            who, pressed = feishu_actions(data)
            return self._apply("Feishu", who, pressed)
        except RefusedError as exc:
            logger.warning("feishu callback refused: {}", exc)
            return web.json_response({"error": str(exc)}, status=exc.status)


def mount(app: web.Application, callbacks: ChatCallbacks) -> None:
    """Add the chat callback routes to the analyzer API ``app``."""
    app.router.add_post("/api/chat/slack/actions", callbacks.slack)
    app.router.add_post("/api/chat/feishu/card", callbacks.feishu)
