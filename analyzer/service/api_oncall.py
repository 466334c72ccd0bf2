"""The analyzer API's on-call routes beside the incident ones: resolve by hand, maintenance windows.

Registered by :func:`analyzer.service.api.build_app`; writes need the same bearer token as the rest.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from aiohttp import web

from analyzer.incidents.maintenance import MaintenanceStore, MaintenanceWindow
from analyzer.incidents.oncall import OnCall
from analyzer.incidents.store import QueryError
from analyzer.service import api_page
from analyzer.service.api_requests import CLOCK, STORE, authorized, error, json_body, signed, text_field
from oximeter.inputs import InputValueError, parse_duration_s, parse_label_value, parse_timestamp
from oximeter.secrets import read_secret


async def resolve_incident(request: web.Request) -> web.Response:
    """``POST /api/incidents/{id}/resolve`` with ``{"by": ..., "note": ...}`` (token): the analyzer
    resolves the incident on its next cycle (202)."""
    if (denied := authorized(request)) is not None:
        return denied
    try:
        data = await json_body(request)
        by, note = signed(data)
    except QueryError as exc:
        return error(400, str(exc))
    incident_id = request.match_info["id"]
    oncall = OnCall(request.app[STORE].conn)
    outcome = oncall.request_resolve(incident_id, by, note, request.app[CLOCK]())
    if outcome == "missing":
        return error(404, f"no incident {incident_id!r}")
    if outcome == "resolved":
        return error(409, f"{incident_id} is resolved already")
    return web.json_response({"ok": True, "resolves": "on the analyzer's next cycle"}, status=202)


async def list_maintenance(request: web.Request) -> web.Response:
    """``GET /api/maintenance``: the windows going on or to come (the config's are in its file)."""
    now = request.app[CLOCK]()
    windows = MaintenanceStore(request.app[STORE].conn).overlapping(now, datetime.max.replace(tzinfo=UTC))
    return web.json_response({"maintenance": [w.to_dict() for w in windows]})


async def add_maintenance(request: web.Request) -> web.Response:
    """``POST /api/maintenance`` with ``{"node"?, "gpu"?, "service"?, "from"?, "to" | "for", "reason",
    "by"}`` (token): times ISO-8601, ``from`` default now, ``for`` a duration from ``from``."""
    if (denied := authorized(request)) is not None:
        return denied
    now = request.app[CLOCK]()
    try:
        data = await json_body(request)
        by, reason = text_field(data, "by"), text_field(data, "reason")
        start = parse_timestamp(data["from"], "from") if "from" in data else now
        if "to" in data:
            end = parse_timestamp(data["to"], "to")
        else:
            span_s = parse_duration_s(text_field(data, "for"), "for", allow_number=False)
            end = start + timedelta(seconds=span_s)
        node, gpu, service = (None if data.get(k) is None else parse_label_value(data[k], k)
                              for k in ("node", "gpu", "service"))
        window = MaintenanceWindow(start, end, node, gpu, service, reason, by)
        if window.end <= now:
            raise QueryError("window: it ended already")
    except (QueryError, InputValueError) as exc:
        return error(400, str(exc))
    except OverflowError:  # a start near the year 9999 plus the duration
        return error(400, "for: the window ends past the year 9999")
    stored = MaintenanceStore(request.app[STORE].conn).add(window, now)
    return web.json_response(stored.to_dict(), status=201)


def add_routes(app: web.Application) -> None:
    """Add the on-call routes to the API ``app``."""
    app.router.add_post("/api/incidents/{id}/resolve", resolve_incident)
    app.router.add_get("/api/maintenance", list_maintenance)
    app.router.add_post("/api/maintenance", add_maintenance)
    api_page.add_routes(app, read_secret("OXIMETER_PAGE_TOKEN"))


PATHS = {
    "/api/incidents/{id}/resolve": {"post": {
        "summary": "resolve by hand (applied on the analyzer's next cycle)", "security": [{"bearer": []}],
        "parameters": [{"name": "id", "in": "path", "required": True, "schema": {"type": "string"}}],
        "requestBody": {"required": True, "content": {"application/json": {"schema": {
            "type": "object", "properties": {"by": {"type": "string"}, "note": {"type": "string"}},
            "required": ["by"]}}}},
        "responses": {"202": {"description": "requested"}, "400": {"description": "malformed body"},
                      "401": {"description": "missing or wrong bearer token"},
                      "403": {"description": "writes disabled (no token configured)"},
                      "404": {"description": "no such incident"},
                      "409": {"description": "resolved already"}}}},
    "/api/maintenance": {
        "get": {"summary": "maintenance windows going on or to come",
                "responses": {"200": {"description": "{maintenance: [...]}"}}},
        "post": {"summary": "declare a maintenance window", "security": [{"bearer": []}],
                 "requestBody": {"required": True, "content": {"application/json": {"schema": {
                     "type": "object", "required": ["reason", "by"], "properties": {
                         k: {"type": "string"}
                         for k in ("node", "gpu", "service", "from", "to", "for", "reason", "by")}}}}},
                 "responses": {"201": {"description": "the window, with its id"},
                               "400": {"description": "malformed body"},
                               "401": {"description": "missing or wrong bearer token"},
                               "403": {"description": "writes disabled (no token configured)"}}}},
}
