"""The analyzer's HTTP API (aiohttp, 127.0.0.1 by default): incidents, acks, silences, annotations, changes.

Reads are open; writes need ``Authorization: Bearer <OXIMETER_API_TOKEN>`` and are refused
outright when no token is configured (a write API without a secret is not a default we ship).
"""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta
from typing import Any

from aiohttp import web
from loguru import logger
from pydantic import SecretStr

from analyzer.detection.events import AnomalyEvent, iso_utc
from analyzer.incidents.lifecycle import ChangeEvent
from analyzer.incidents.oncall import MAX_SILENCE_S, OnCall
from analyzer.incidents.store import QUERY_PARAMS, IncidentQuery, IncidentStore, QueryError, parse_duration
from analyzer.service import api_oncall
from analyzer.service.api_requests import (
    CLOCK,
    GUARD,
    MAX_BODY_BYTES,
    STORE,
    TOKEN,
    Clock,
    Handler,
    authorized,
    error,
    json_body,
    signed,
    text_field,
)
from oximeter.guard import ConnectionGuard, GuardedSite
from oximeter.inputs import InputValueError, parse_epoch_ms, parse_label_value, parse_timestamp


def _now() -> datetime:
    return datetime.now(UTC)


async def list_incidents(request: web.Request) -> web.Response:
    """``GET /api/incidents``: the same filters as ``oximeter incidents list``."""
    try:
        now = request.app[CLOCK]()
        query = IncidentQuery.from_params(dict(request.query), now)
    except QueryError as exc:
        return error(400, str(exc))
    found = request.app[STORE].query(query, now)
    return web.json_response({"incidents": [i.to_dict() for i in found]})


async def get_incident(request: web.Request) -> web.Response:
    """``GET /api/incidents/{id}``: the incident, its acks/silences and its change records."""
    store = request.app[STORE]
    inc = store.get(request.match_info["id"])
    if inc is None:
        return error(404, f"no incident {request.match_info['id']!r}")
    return web.json_response(OnCall(store.conn).document(store, inc))


async def ack_incident(request: web.Request) -> web.Response:
    """``POST /api/incidents/{id}/ack`` with ``{"by": ..., "note": ...}`` (token)."""
    if (denied := authorized(request)) is not None:
        return denied
    try:
        data = await json_body(request)
        by, note = signed(data)
    except QueryError as exc:
        return error(400, str(exc))
    if not request.app[STORE].ack(request.match_info["id"], by, note, request.app[CLOCK]()):
        return error(404, f"no incident {request.match_info['id']!r}")
    return web.json_response({"ok": True})


async def silence_incident(request: web.Request) -> web.Response:
    """``POST /api/incidents/{id}/silence`` with ``{"for": "2h"}`` or ``{"until": ISO}`` (token)."""
    if (denied := authorized(request)) is not None:
        return denied
    now = request.app[CLOCK]()
    try:
        data = await json_body(request)
        by, note = signed(data)
        if "until" in data:
            until = parse_timestamp(data["until"], "until")
        else:
            until = now + parse_duration(text_field(data, "for", "1h"), "for")
        if until is None or until <= now:
            raise QueryError("until: expected a future ISO-8601 time")
        if until - now > timedelta(seconds=MAX_SILENCE_S):
            raise QueryError("silence: at most 30 days")
    except (QueryError, ValueError) as exc:
        return error(400, str(exc))
    if not request.app[STORE].silence(request.match_info["id"], until, by, note, now):
        return error(404, f"no incident {request.match_info['id']!r}")
    return web.json_response({"ok": True, "until": iso_utc(until)})


def _millis(request: web.Request, key: str, default: datetime) -> datetime:
    raw = request.query.get(key)
    if raw is None:
        return default
    try:
        return parse_epoch_ms(raw, key)
    except InputValueError as exc:
        raise QueryError(str(exc)) from None


async def get_annotations(request: web.Request) -> web.Response:
    """``GET /api/annotations?from=ms&to=ms``: incidents as Grafana region annotations.

    A flat JSON array of ``{time, timeEnd, title, text, tags}`` in epoch ms: what Grafana's
    Infinity datasource turns into annotations without a transform. ``tags`` is one
    comma-separated string (layer, rule, severity, state, services, nodes), the form Infinity
    reads and Grafana splits into tags; a comma inside a value becomes a space.
    """
    now = request.app[CLOCK]()
    try:
        start = _millis(request, "from", now - timedelta(hours=6))
        end = _millis(request, "to", now)
        filters = {k: v for k, v in request.query.items() if k not in ("from", "to")}
        since_s = max(0.0, (now - start).total_seconds())
        query = IncidentQuery.from_params({**filters, "since": f"{since_s:.0f}s"})
    except QueryError as exc:
        return error(400, str(exc))
    out = []
    for inc in request.app[STORE].query(query, now):
        stop = inc.resolved_at or now
        if inc.first_onset > end or stop < start:
            continue
        tags = (inc.layer, inc.rule, inc.severity, inc.state, *inc.services, *inc.nodes)
        out.append({"time": int(inc.first_onset.timestamp() * 1000), "timeEnd": int(stop.timestamp() * 1000),
                    "isRegion": True, "title": inc.title, "text": inc.sentence, "id": inc.id,
                    "tags": ",".join(tag.replace(",", " ") for tag in tags)})
    return web.json_response(out)


async def record_change(request: web.Request) -> web.Response:
    """``POST /api/changes`` with ``{"kind", "description", "labels"?, "at"?}`` (token)."""
    if (denied := authorized(request)) is not None:
        return denied
    now = request.app[CLOCK]()
    try:
        data = await json_body(request)
        kind, description = text_field(data, "kind", limit=64), text_field(data, "description")
        labels = data.get("labels", {})
        if not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values()):
            raise QueryError("labels: expected an object of string values")
        at = parse_timestamp(data["at"], "at") if "at" in data else now
        labels = {parse_label_value(k, "labels"): parse_label_value(v, f"labels.{k}")
                  for k, v in labels.items()}
    except (QueryError, ValueError) as exc:
        return error(400, str(exc))
    change = ChangeEvent(at, kind, description, AnomalyEvent.labels_from(labels), "api")
    change_id = request.app[STORE].record_change_event(change, now)
    return web.json_response({**change.to_dict(), "id": change_id}, status=201)


@web.middleware
async def store_failures(request: web.Request, handler: Handler) -> web.StreamResponse:
    """A store that cannot read or write (a full disk, a lost file) is a 503 the client may retry,
    with the reason, never a 500 with a traceback."""
    try:
        return await handler(request)
    except (sqlite3.Error, OSError) as exc:
        logger.error("analyzer API: store failed on {} {}: {}", request.method, request.path, exc)
        return web.json_response({"error": f"store unavailable ({exc}); nothing was changed, retry later"},
                                 status=503, headers={"Retry-After": "30"})


async def openapi(request: web.Request) -> web.Response:
    """``GET /openapi.json``."""
    return web.json_response({**OPENAPI, "paths": {**OPENAPI["paths"], **api_oncall.PATHS}})


def api_guard() -> ConnectionGuard:
    """The API's connection guard: its clients are Grafana, Alertmanager, scripts and people, a
    handful of connections each; a client holding more is refused, never the ones behind it."""
    return ConnectionGuard(header_timeout_s=10.0, idle_timeout_s=75.0, max_per_client=64,
                           body_timeout_s=10.0, name="analyzer API")


def build_app(store: IncidentStore, token: SecretStr | None, clock: Clock = _now,
              guard: ConnectionGuard | None = None) -> web.Application:
    """The API as an aiohttp application (the daemon runs it beside its cycle), kept to ``guard``."""
    guard = guard or api_guard()
    app = web.Application(client_max_size=MAX_BODY_BYTES, middlewares=[guard.middleware, store_failures])
    app[STORE], app[TOKEN], app[CLOCK], app[GUARD] = store, token, clock, guard
    app.router.add_get("/api/incidents", list_incidents)
    app.router.add_get("/api/incidents/{id}", get_incident)
    app.router.add_post("/api/incidents/{id}/ack", ack_incident)
    app.router.add_post("/api/incidents/{id}/silence", silence_incident)
    app.router.add_get("/api/annotations", get_annotations)
    app.router.add_post("/api/changes", record_change)
    app.router.add_get("/openapi.json", openapi)
    api_oncall.add_routes(app)
    return app


_FILTERS = [{"name": n, "in": "query", "required": False, "schema": {"type": "string"}, "description": d}
            for n, d in QUERY_PARAMS.items()]
_ERR = {"description": "malformed request; the body's error names the reason",
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
_AUTH = {"401": {"description": "missing or wrong bearer token"},
         "403": {"description": "writes disabled (no token configured)"}}
_STORE = {"description": "the store cannot be read or written (e.g. a full disk); retry later",
          "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
_ID = [{"name": "id", "in": "path", "required": True, "schema": {"type": "string"}}]


def _body_schema(props: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"required": True, "content": {"application/json": {"schema": {
        "type": "object", "properties": props, "required": required}}}}


OPENAPI: dict[str, Any] = {
    "openapi": "3.0.3",
    "info": {"title": "Oximeter analyzer API", "version": "1"},
    "components": {
        "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        "schemas": {"Error": {"type": "object", "properties": {"error": {"type": "string"}}}},
    },
    "paths": {
        "/api/incidents": {"get": {"summary": "list incidents", "parameters": _FILTERS,
                                   "responses": {"200": {"description": "{incidents: [...]}"}, "400": _ERR}}},
        "/api/incidents/{id}": {"get": {"summary": "one incident", "parameters": _ID,
                                        "responses": {"200": {"description": "the incident"},
                                                      "404": {"description": "no such incident"}}}},
        "/api/incidents/{id}/ack": {"post": {
            "summary": "acknowledge", "security": [{"bearer": []}], "parameters": _ID,
            "requestBody": _body_schema({"by": {"type": "string"}, "note": {"type": "string"}}, ["by"]),
            "responses": {"200": {"description": "acknowledged"}, "400": _ERR, **_AUTH,
                          "404": {"description": "no such incident"}}}},
        "/api/incidents/{id}/silence": {"post": {
            "summary": "silence notifications", "security": [{"bearer": []}], "parameters": _ID,
            "requestBody": _body_schema({"by": {"type": "string"}, "note": {"type": "string"},
                                         "for": {"type": "string"}, "until": {"type": "string"}}, ["by"]),
            "responses": {"200": {"description": "silenced"}, "400": _ERR, **_AUTH,
                          "404": {"description": "no such incident"}}}},
        "/api/annotations": {"get": {
            "summary": "incidents as Grafana annotations (Infinity/JSON datasource)",
            "parameters": [{"name": "from", "in": "query", "schema": {"type": "integer"}},
                           {"name": "to", "in": "query", "schema": {"type": "integer"}},
                           *(f for f in _FILTERS if f["name"] not in ("since", "from", "to"))],
            "responses": {"200": {"description": "[{time, timeEnd, isRegion, title, text, id, tags}]; "
                                                  "tags comma-separated"},
                          "400": _ERR}}},
        "/api/changes": {"post": {
            "summary": "record a change event (deploy, config, restart, maintenance)",
            "security": [{"bearer": []}],
            "requestBody": _body_schema({"kind": {"type": "string"}, "description": {"type": "string"},
                                         "labels": {"type": "object"}, "at": {"type": "string"}},
                                        ["kind", "description"]),
            "responses": {"201": {"description": "recorded"}, "400": _ERR, **_AUTH, "503": _STORE}}},
        "/openapi.json": {"get": {"summary": "this document",
                                  "responses": {"200": {"description": "OpenAPI"}}}},
    },
}


async def start_api(app: web.Application, host: str, port: int) -> web.AppRunner:
    """Serve ``app`` on ``host:port``; the caller ``await runner.cleanup()`` on shutdown."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    guard = app.get(GUARD)  # an app of build_app() has one; another served the same way may not
    site = (web.TCPSite(runner, host, port) if guard is None
            else GuardedSite(runner, host, port, guard, backlog=1024))
    await site.start()
    return runner
