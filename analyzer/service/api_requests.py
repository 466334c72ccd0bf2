"""What every route of the analyzer's API shares: the application's keys (store, token, clock,
guard), the bearer check on writes, and reading a request's JSON body and its text fields."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from aiohttp import web
from pydantic import SecretStr

from analyzer.incidents.store import IncidentStore, QueryError
from oximeter.auth import bearer_refusal
from oximeter.guard import ConnectionGuard, read_body
from oximeter.inputs import InputValueError, parse_json

Clock = Callable[[], datetime]
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
STORE: web.AppKey[IncidentStore] = web.AppKey("store", IncidentStore)
TOKEN: web.AppKey[SecretStr | None] = web.AppKey("token", SecretStr)
CLOCK: web.AppKey[Clock] = web.AppKey("clock")
GUARD: web.AppKey[ConnectionGuard] = web.AppKey("guard", ConnectionGuard)
MAX_BODY_BYTES = 64 * 1024  # an ack, a silence or a change event; the relay reads its own, larger


def error(status: int, reason: str) -> web.Response:
    return web.json_response({"error": reason}, status=status)


def authorized(request: web.Request) -> web.Response | None:
    return bearer_refusal(request.headers, request.app[TOKEN],
                          "writes are disabled: OXIMETER_API_TOKEN is not set on the analyzer")


async def json_body(request: web.Request) -> dict[str, Any]:
    try:
        data = parse_json(await read_body(request, request.app[GUARD], MAX_BODY_BYTES))
    except InputValueError as exc:
        raise QueryError(str(exc)) from None
    if not isinstance(data, dict):
        raise QueryError("body: expected a JSON object")
    return data


def text_field(data: dict[str, Any], key: str, default: str | None = None, limit: int = 500) -> str:
    value = data.get(key, default)
    if not isinstance(value, str) or (default is None and not value.strip()):
        raise QueryError(f"{key}: expected a non-empty string")
    if len(value) > limit:
        raise QueryError(f"{key}: longer than {limit} characters")
    return value


def signed(data: dict[str, Any]) -> tuple[str, str]:
    """Who takes an on-call action (``by``, required) and their ``note`` (optional)."""
    return text_field(data, "by"), text_field(data, "note", "")
