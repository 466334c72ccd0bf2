"""The one bearer-token check every server with write endpoints runs (analyzer API, alert relay,
simulator admin): the token is compared in constant time and never echoed."""

from __future__ import annotations

import hmac
from collections.abc import Mapping

from aiohttp import web
from pydantic import SecretStr


def bearer_refusal(headers: Mapping[str, str], token: SecretStr | None, disabled: str) -> web.Response | None:
    """None when ``Authorization: Bearer <token>`` matches; otherwise the JSON answer: 403 with
    ``disabled`` (how to enable writes) when no token is configured, 401 with a ``Bearer``
    challenge when the header is missing or wrong."""
    if token is None:
        return web.json_response({"error": disabled}, status=403)
    header = headers.get("Authorization", "")
    given = header[7:] if header.startswith("Bearer ") else ""
    if not given or not hmac.compare_digest(given.encode(), token.get_secret_value().encode()):
        return web.json_response({"error": "missing or wrong bearer token"}, status=401,
                                 headers={"WWW-Authenticate": "Bearer"})
    return None
