"""The analyzer API's on-call routes beside the incident ones: resolve by hand.

Registered by :func:`analyzer.api.build_app`; writes need the same bearer token as the rest.
"""

from __future__ import annotations

from aiohttp import web

from analyzer import api
from analyzer.incident_store import QueryError
from analyzer.oncall import OnCall


async def resolve_incident(request: web.Request) -> web.Response:
    """``POST /api/incidents/{id}/resolve`` with ``{"by": ..., "note": ...}`` (token): the analyzer
    resolves the incident on its next cycle (202)."""
    if (denied := api._authorized(request)) is not None:
        return denied
    try:
        data = await api._body(request)
        by, note = api._text(data, "by"), api._text(data, "note", "")
    except QueryError as exc:
        return api._error(400, str(exc))
    incident_id = request.match_info["id"]
    oncall = OnCall(request.app[api.STORE].conn)
    outcome = oncall.request_resolve(incident_id, by, note, request.app[api.CLOCK]())
    if outcome == "missing":
        return api._error(404, f"no incident {incident_id!r}")
    if outcome == "resolved":
        return api._error(409, f"{incident_id} is resolved already")
    return web.json_response({"ok": True, "resolves": "on the analyzer's next cycle"}, status=202)


def add_routes(app: web.Application) -> None:
    """Add the on-call routes to the API ``app``."""
    app.router.add_post("/api/incidents/{id}/resolve", resolve_incident)


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
}
