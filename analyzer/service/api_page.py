"""The incident pages on the analyzer's API: ``/incidents`` and ``/incidents/<id>``, with forms to
acknowledge, silence and resolve that work without JavaScript.

Reading and writing take separate tokens. Reading is open unless ``OXIMETER_PAGE_TOKEN`` is set;
then the browser asks for it (HTTP Basic, any user name, the token as password), so a page link
in chat carries no secret. Writing takes the API's write token (``OXIMETER_API_TOKEN``), typed
into the form each time; with none configured the forms are refused, as the API's writes are.
"""

from __future__ import annotations

import base64
import binascii
import hmac
from datetime import timedelta

from aiohttp import web
from pydantic import SecretStr

from analyzer.incidents.oncall import MAX_SILENCE_S, OnCall
from analyzer.incidents.store import IncidentQuery, QueryError, parse_duration
from analyzer.service.api_requests import CLOCK, STORE, TOKEN
from analyzer.service.page import incident_page, list_page, message_page

PAGE_TOKEN: web.AppKey[SecretStr | None] = web.AppKey("page_token", SecretStr)
VERBS = ("ack", "silence", "resolve")


def _html(text: str, status: int = 200) -> web.Response:
    return web.Response(text=text, status=status, content_type="text/html", charset="utf-8")


def _can_read(request: web.Request) -> web.Response | None:
    token = request.app.get(PAGE_TOKEN)
    if token is None:
        return None
    scheme, _, encoded = request.headers.get("Authorization", "").partition(" ")
    try:
        password = base64.b64decode(encoded, validate=True).decode().partition(":")[2]
    except (binascii.Error, UnicodeDecodeError):
        password = ""
    expected = token.get_secret_value().encode()
    if scheme.lower() == "basic" and hmac.compare_digest(password.encode(), expected):
        return None
    return web.Response(status=401, text="this page needs the read token",
                        headers={"WWW-Authenticate": 'Basic realm="Oximeter incidents"'})


async def incidents_list(request: web.Request) -> web.Response:
    """``GET /incidents``: the list, filtered as ``oximeter incidents list`` filters."""
    if (denied := _can_read(request)) is not None:
        return denied
    params = {k: v for k, v in request.query.items() if v.strip()}
    now, store = request.app[CLOCK](), request.app[STORE]
    query = {**params, **({} if {"since", "from", "to"} & params.keys() else {"since": "24h"})}
    try:
        found = store.query(IncidentQuery.from_params(query, now), now)
    except QueryError as exc:
        return _html(list_page([], params, {}, str(exc)), 400)
    oncall = OnCall(store.conn)
    suppressed = {i.id: reason for i in found if (reason := oncall.suppressed_by(i.id)) is not None}
    return _html(list_page(found, params, suppressed))


async def incident_detail(request: web.Request) -> web.Response:
    """``GET /incidents/{id}``: one incident."""
    if (denied := _can_read(request)) is not None:
        return denied
    store, incident_id = request.app[STORE], request.match_info["id"]
    incident = store.get(incident_id)
    if incident is None:
        return _html(message_page("No such incident", f"There is no incident {incident_id}."), 404)
    doc = OnCall(store.conn).document(store, incident)
    return _html(incident_page(incident, doc, request.app[CLOCK]()))


async def incident_action(request: web.Request) -> web.Response:
    """``POST /incidents/{id}/{verb}`` from the page's forms; back to the page when done (303)."""
    store, incident_id, verb = request.app[STORE], request.match_info["id"], request.match_info["verb"]
    back = f"/incidents/{incident_id}"
    if verb not in VERBS:
        return _html(message_page("Unknown action", f"{verb} is not an action."), 404)
    form = await request.post()
    write = request.app[TOKEN]
    typed = str(form.get("token", ""))
    if write is None:
        return _html(message_page("Writes are disabled", "OXIMETER_API_TOKEN is not set on the analyzer.",
                                  back), 403)
    if not hmac.compare_digest(typed.encode(), write.get_secret_value().encode()):
        wrong = "The write token was not right; nothing changed."
        return _html(message_page("Wrong token", wrong, back), 401)
    by, note = str(form.get("by", "")).strip()[:200], str(form.get("note", ""))[:500]
    now = request.app[CLOCK]()
    if not by:
        return _html(message_page("Who?", "Say who you are: the timeline records it.", back), 400)
    if verb == "ack":
        done = store.ack(incident_id, by, note, now)
    elif verb == "silence":
        try:
            span = parse_duration(str(form.get("for", "1h")), "for")
        except QueryError as exc:
            return _html(message_page("Bad silence", str(exc), back), 400)
        if not timedelta(0) < span <= timedelta(seconds=MAX_SILENCE_S):
            return _html(message_page("Bad silence", "A silence lasts up to 30 days.", back), 400)
        done = store.silence(incident_id, now + span, by, note, now)
    else:
        done = OnCall(store.conn).request_resolve(incident_id, by, note, now) == "requested"
    if not done:
        missing = f"Incident {incident_id} is missing or resolved already."
        return _html(message_page("Not done", missing, back), 404)
    raise web.HTTPSeeOther(back)


def add_routes(app: web.Application, read_token: SecretStr | None) -> None:
    """Add the pages to the API ``app``; ``read_token`` guards reading them (None: open)."""
    app[PAGE_TOKEN] = read_token
    app.router.add_get("/incidents", incidents_list)
    app.router.add_get("/incidents/{id}", incident_detail)
    app.router.add_post("/incidents/{id}/{verb}", incident_action)
