"""Hostile JSON and time values at every listener and CLI: a 400 or exit 2 naming the input, never a 500.

Every listener that reads a JSON body (the analyzer API, the Alertmanager relay on it, the
simulator's admin and engine ports, the gateway) is served in this process and sent the same
table of bodies; the CLI time options are run through ``oximeter.cli.main``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests
from api_server import ApiServer
from pydantic import SecretStr

from analyzer.incidents.store import IncidentStore
from analyzer.service.api import build_app
from gateway.app import Gateway
from gateway.settings import GatewaySettings
from oximeter.cli import main
from oximeter.store import connect
from reporter.outbox import Outbox
from reporter.relay import PATH, Relay, mount
from reporter.settings import ReporterSettings
from simulator.clock import RealClock
from simulator.engine import EngineParams
from simulator.fleet import Fleet
from simulator.server import build_server, engine_app

TOKEN = "limits-token"
DEEP = b"[" * 5000 + b"]" * 5000
DEEP_OBJECT = b'{"a":' * 5000 + b"1" + b"}" * 5000
SURROGATE = b'{"kind": "deploy", "description": "\\ud800", "model": "m", "alerts": ["\\ud800"]}'
BODIES = {"nested 5000 deep (array)": (DEEP, "nested deeper than"),
          "nested 5000 deep (object)": (DEEP_OBJECT, "nested deeper than"),
          "lone surrogate": (SURROGATE, "lone surrogate")}


@dataclass
class Listeners:
    urls: dict[str, str]
    gateway: Gateway


@pytest.fixture(scope="module")
def listeners(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Listeners]:
    conn = connect(tmp_path_factory.mktemp("limits") / "oximeter.db")
    store = IncidentStore(conn)
    api_app = build_app(store, SecretStr(TOKEN))
    mount(api_app, Relay(store, Outbox(conn, {}), ReporterSettings(), SecretStr(TOKEN)))
    fleet = Fleet(RealClock(), nodes=1, gpus_per_node=1, params=EngineParams(), model_name="m")
    sim = build_server(fleet, "127.0.0.1", 0, SecretStr(TOKEN), 8, wall_origin_s=0.0)
    gateway = Gateway(GatewaySettings(upstream="http://127.0.0.1:9", port=0, warmup=False))
    node = next(iter(sim.runtimes.values()))
    servers = {"api": ApiServer(api_app), "sim": ApiServer(engine_app(sim, node)),
               "gateway": ApiServer(gateway.build_app())}
    urls = {"/api/changes": servers["api"].url("/api/changes"), PATH: servers["api"].url(PATH),
            "/admin/faults": servers["sim"].url("/admin/faults"),
            "/v1/completions (simulator)": servers["sim"].url("/v1/completions"),
            "/v1/chat/completions (gateway)": servers["gateway"].url("/v1/chat/completions")}
    yield Listeners(urls, gateway)
    for server in servers.values():
        server.stop()
    conn.close()


@pytest.mark.parametrize("body", BODIES)
@pytest.mark.parametrize("where", ["/api/changes", PATH, "/admin/faults", "/v1/completions (simulator)",
                                   "/v1/chat/completions (gateway)"])
def test_hostile_json_is_a_400_naming_the_problem(listeners: Listeners, where: str, body: str) -> None:
    data, reason = BODIES[body]
    rejected = listeners.gateway.metrics.registry.get_sample_value(
        "oximeter_rejected_requests_total", {"service": "llm", "node": "local", "model": "other",
                                             "reason": "invalid_json"}) or 0.0
    answer = requests.post(listeners.urls[where], data=data, timeout=30, headers={
        "Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"})
    assert answer.status_code == 400, answer.text
    assert reason in answer.text
    if "gateway" in where:  # the gateway counts what it refuses
        assert listeners.gateway.metrics.registry.get_sample_value(
            "oximeter_rejected_requests_total", {"service": "llm", "node": "local", "model": "other",
                                                 "reason": "invalid_json"}) == rejected + 1


@pytest.mark.parametrize("at", ["9999-12-31T23:59:59-14:00", "0001-01-01T00:00:00+14:00",
                                "2500-01-01T00:00:00Z"])
def test_out_of_range_times_are_a_400_naming_the_field(listeners: Listeners, at: str) -> None:
    answer = requests.post(listeners.urls["/api/changes"], timeout=30,
                           headers={"Authorization": f"Bearer {TOKEN}"},
                           json={"kind": "deploy", "description": "d", "at": at})
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"].startswith("at: ")


@pytest.mark.parametrize(("argv", "field"), [
    (["analyze", "--once", "--replay", "nowhere", "--replay-start", "99999-01-01T00:00:00Z"],
     "--replay-start"),
    (["analyze", "--once", "--replay", "nowhere", "--replay-start", "9999-12-31T23:59:59-14:00"],
     "--replay-start"),
    (["sim", "history", "--scenario", "x.yaml", "--out", "x", "--end", "1e300"], "--end"),
    (["sim", "history", "--scenario", "x.yaml", "--out", "x", "--end", "nan"], "--end"),
])
def test_out_of_range_cli_times_exit_2_naming_the_option(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str], field: str) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    err = capsys.readouterr().err
    assert exited.value.code == 2
    assert f"argument {field}: {field}: " in err and "Traceback" not in err
