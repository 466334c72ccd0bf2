"""Admin and fleet routes, served on every engine port over the shared simulation state.

Admin (``/admin/*``) needs ``Authorization: Bearer <OXIMETER_ADMIN_TOKEN>``; without a configured
token it refuses everything (403), so an exposed simulator cannot be driven by strangers.
The fleet read API (``/fleet/*``) is what the exporter's sim backend scrapes: no token.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from aiohttp import web

from oximeter.auth import bearer_refusal
from oximeter.inputs import InputValueError, parse_json
from simulator.fault_kinds import Effect
from simulator.faults import FaultError

if TYPE_CHECKING:
    from simulator.server import SimServer

TOKEN_ENV = "OXIMETER_ADMIN_TOKEN"


def _json(data: Any, status: int = 200) -> web.Response:
    return web.Response(text=json.dumps(data), status=status, content_type="application/json")


def _refused(request: web.Request, server: SimServer) -> web.Response | None:
    disabled = f"admin API disabled: start the simulator with {TOKEN_ENV} (or {TOKEN_ENV}_FILE) set"
    return bearer_refusal(request.headers, server.admin_token, disabled)


def add_routes(app: web.Application, server: SimServer) -> None:
    """Register the admin and fleet routes on ``app``."""
    fleet = server.fleet

    async def list_faults(request: web.Request) -> web.Response:
        if (refused := _refused(request, server)) is not None:
            return refused
        now = server.now()
        return _json(
            {
                "simulation": True,
                "now": now,
                "faults": [{**f.to_json(), "active": f.active(now)} for f in fleet.faults.all()],
            }
        )

    async def add_fault(request: web.Request) -> web.Response:
        if (refused := _refused(request, server)) is not None:
            return refused
        try:
            data = parse_json(await request.read())
        except InputValueError as exc:
            return _json({"error": str(exc)}, 400)
        try:
            fault = fleet.add_fault(data, live=True)
        except FaultError as exc:
            return _json({"error": str(exc)}, 400)
        server.wake_all()
        return _json(fault.to_json(), 201)

    async def delete_fault(request: web.Request) -> web.Response:
        if (refused := _refused(request, server)) is not None:
            return refused
        fault = fleet.faults.remove(request.match_info["fault_id"])
        if fault is None:
            return _json({"error": f"no fault with id {request.match_info['fault_id']!r}"}, 404)
        server.wake_all()
        return _json(fault.to_json())

    async def release(request: web.Request) -> web.Response:
        # Simulator-only test hook: let a held request (sim_hold_key) continue.
        if (refused := _refused(request, server)) is not None:
            return refused
        key = request.match_info["key"]
        waiting = key in server.holds
        server.hold(key).set()
        return _json({"released": key, "was_waiting": waiting})

    async def fleet_info(_request: web.Request) -> web.Response:
        return _json(
            {
                "simulation": True,
                "model": fleet.model_name,
                "now": server.now(),
                "nodes": [
                    {"node": n, "port": server.port_of(n), "gpus": len(fleet.nodes[n].gpus)}
                    for n in fleet.nodes
                ],
            }
        )

    async def fleet_gpus(request: web.Request) -> web.Response:
        name = request.query.get("node", "")
        if name not in fleet.nodes:
            return _json({"error": f"node: unknown node {name!r} (known: {', '.join(fleet.nodes)})"}, 404)
        now = server.now()
        if fleet.faults.strongest(now, name, effect=Effect.TELEMETRY_LOST) is not None:
            return _json({"simulation": True, "node": name, "error": "telemetry lost (simulated fault)"}, 503)
        return _json(fleet.gpus_json(name, now, server.wall_origin_s))

    app.router.add_get("/admin/faults", list_faults)
    app.router.add_post("/admin/faults", add_fault)
    app.router.add_delete("/admin/faults/{fault_id}", delete_fault)
    app.router.add_post("/admin/release/{key}", release)
    app.router.add_get("/fleet", fleet_info)
    app.router.add_get("/fleet/gpus", fleet_gpus)
