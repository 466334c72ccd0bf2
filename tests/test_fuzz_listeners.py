"""Fuzzing as tests, for the listeners and inputs beyond the analyzer API's: the Alertmanager relay,
the gateway's request parsing, hostile JSON (deep, lone surrogates, not UTF-8) everywhere, config
values that are infinite or not URLs, and the CLI's time arguments.

Asserted: no 5xx from parsing and the listener keeps serving; CLI exit codes 0, 1 or 2 and never a
traceback. Same budget as ``test_fuzz_inputs.py`` (``OXIMETER_FUZZ_EXAMPLES`` for a long run).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from aiohttp import web
from api_server import ApiServer
from hypothesis import given
from hypothesis import strategies as st
from pydantic import SecretStr
from test_fuzz_inputs import EDGES, FUZZ, JSON, TEXT, VALUE

from analyzer.incidents.store import IncidentStore
from analyzer.service.api import build_app
from gateway.app import Gateway
from gateway.settings import GatewaySettings
from oximeter.cli import main
from oximeter.config import load_config
from oximeter.errors import ConfigError
from oximeter.inputs import MAX_DURATION_S
from oximeter.store import connect
from reporter.outbox import Outbox
from reporter.relay import PATH, Relay, mount
from reporter.settings import ReporterSettings

TOKEN = "fuzz-listeners"
# Bodies no JSON library writes but a client can send.
HOSTILE = st.one_of(
    st.integers(1, 6000).map(lambda n: b"[" * n + b"]" * n),
    st.integers(1, 6000).map(lambda n: b'{"a":' * n + b"1" + b"}" * n),
    st.sampled_from([b'"\\ud800"', b'{"model": "\\udfff"}', b'{"alerts": ["\\ud83d"]}', b"\xff\xfe{}",
                     b'{"a": NaN}', b'{"a": Infinity}', b'{"a": 1e999}', b"", b"{", b"null"]),
    st.binary(max_size=64))
ALERT = st.fixed_dictionaries({
    "status": st.one_of(st.sampled_from(["firing", "resolved"]), TEXT),
    "labels": st.dictionaries(st.sampled_from(["alertname", "node", "service", "layer", "severity"]) | TEXT,
                              st.one_of(TEXT, EDGES), max_size=4),
    "annotations": st.dictionaries(TEXT, TEXT, max_size=2),
    "startsAt": st.one_of(EDGES, TEXT, st.sampled_from(["2026-03-02T10:00:00Z",
                                                       "9999-12-31T23:59:59-14:00"])),
    "endsAt": st.one_of(EDGES, st.just("0001-01-01T00:00:00Z")),
    "fingerprint": st.one_of(TEXT, st.just("fp")),
    "generatorURL": TEXT})
PAYLOAD = st.fixed_dictionaries({
    "version": st.sampled_from(["4", "3", ""]), "groupKey": TEXT, "status": TEXT, "receiver": TEXT,
    "groupLabels": st.dictionaries(TEXT, TEXT, max_size=2),
    "commonLabels": st.dictionaries(TEXT, TEXT, max_size=2),
    "commonAnnotations": st.dictionaries(TEXT, TEXT, max_size=2), "externalURL": TEXT,
    "alerts": st.lists(ALERT, max_size=3)})


REQUEST_KEYS = st.sampled_from(["model", "messages", "prompt", "max_tokens", "stream",
                                "max_completion_tokens"])
REQUEST = st.dictionaries(REQUEST_KEYS | TEXT, st.one_of(VALUE, JSON), max_size=4)


async def _completion(_request: web.Request) -> web.Response:
    return web.json_response({"id": "x", "object": "chat.completion", "model": "m", "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}]})


@pytest.fixture(scope="module")
def listeners(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, ApiServer]]:
    conn = connect(tmp_path_factory.mktemp("fuzz-listeners") / "oximeter.db")
    store = IncidentStore(conn)
    api = build_app(store, SecretStr(TOKEN))
    mount(api, Relay(store, Outbox(conn, {}), ReporterSettings(), SecretStr(TOKEN)))
    engine = web.Application()
    engine.router.add_post("/v1/chat/completions", _completion)
    engine.router.add_post("/v1/completions", _completion)
    servers = {"api": ApiServer(api), "engine": ApiServer(engine)}
    gateway = Gateway(GatewaySettings(upstream=servers["engine"].url(""), port=0, warmup=False))
    servers["gateway"] = ApiServer(gateway.build_app())
    yield servers
    for server in servers.values():
        server.stop()
    conn.close()


def _post(server: ApiServer, path: str, data: bytes) -> int:
    answer = server.session.post(server.url(path), data=data, timeout=30, headers={
        "Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"})
    return answer.status_code


@FUZZ
@given(body=st.one_of(PAYLOAD.map(lambda p: json.dumps(p).encode()), HOSTILE,
                      JSON.map(lambda j: json.dumps(j).encode())))
def test_relay_never_5xx_on_what_alertmanager_or_anyone_posts(listeners: dict[str, ApiServer],
                                                               body: bytes) -> None:
    assert _post(listeners["api"], PATH, body) < 500, body[:200]


@FUZZ
@given(body=st.one_of(HOSTILE, JSON.map(lambda j: json.dumps(j).encode()),
                      REQUEST.map(lambda d: json.dumps(d).encode())),
       path=st.sampled_from(["/v1/chat/completions", "/v1/completions"]))
def test_gateway_never_5xx_on_what_a_client_posts(listeners: dict[str, ApiServer], body: bytes,
                                                  path: str) -> None:
    assert _post(listeners["gateway"], path, body) < 500, body[:200]


@FUZZ
@given(body=HOSTILE, path=st.sampled_from(["/api/changes", "/api/incidents/inc-1/ack",
                                           "/api/incidents/inc-1/silence"]))
def test_api_never_5xx_on_hostile_json(listeners: dict[str, ApiServer], body: bytes, path: str) -> None:
    assert _post(listeners["api"], path, body) < 500, body[:200]
    assert listeners["api"].session.get(listeners["api"].url("/openapi.json"), timeout=10).status_code == 200


NUMBER = st.one_of(st.floats(), st.integers(), st.sampled_from([float("inf"), float("nan"), 1e300, -1.0]))
DURATION_KEYS = st.sampled_from([("incidents", "lookback_s"), ("incidents", "resolve_after_s"),
                                 ("analyzer", "interval_s"), ("gateway", "header_timeout_s"),
                                 ("reporter", "storm_window_s")])
URLISH = re.compile(r"https?://[A-Za-z0-9.-]+(:[0-9]+)?/?")
URL_KEYS = st.sampled_from([("analyzer", "prometheus", "url"), ("reporter", "digest", "prometheus_url"),
                            ("reporter", "api_url"), ("reporter", "grafana_url"), ("exporter", "sim_url")])


def _nest(keys: tuple[str, ...], value: Any) -> dict[str, Any]:
    out: Any = value
    for key in reversed(keys):
        out = {key: out}
    return dict(out)


@FUZZ
@given(duration=st.tuples(DURATION_KEYS, NUMBER),
       url=st.tuples(URL_KEYS, st.one_of(TEXT, EDGES, st.just("not a url"), st.just("http://prom:9090"))))
def test_config_durations_and_urls_are_valid_or_a_config_error(
        tmp_path_factory: pytest.TempPathFactory, capsys: pytest.CaptureFixture[str],
        duration: tuple[tuple[str, ...], Any], url: tuple[tuple[str, ...], str]) -> None:
    path = tmp_path_factory.mktemp("cfg") / "oximeter.yaml"
    for keys, value in (duration, url):
        path.write_text(yaml.safe_dump(_nest(keys, value)), encoding="utf-8")
        try:
            load_config(path)
        except ConfigError as exc:
            assert str(path) in str(exc)
        code = main(["config", "check", str(path)])
        err = capsys.readouterr().err
        assert code in (0, 1) and "Traceback" not in err
        if isinstance(value, float | int) and not (math.isfinite(value) and abs(value) <= MAX_DURATION_S):
            assert code == 1 and keys[-1] in err, (keys, value, err)
        if isinstance(value, str) and value and not URLISH.fullmatch(value):
            assert code == 1 and keys[-1] in err, (keys, value, err)


TIME = st.one_of(EDGES, VALUE, st.datetimes().map(lambda d: d.isoformat()),
                 st.sampled_from(["99999-01-01T00:00:00Z", "9999-12-31T23:59:59-14:00", "1e300", "-1e300",
                                  "nan"]))


@FUZZ
@given(option=st.sampled_from(["--replay-start", "--end"]), value=TIME)
@pytest.mark.usefixtures("logs_to_stderr")
def test_cli_time_arguments_exit_0_1_2_without_traceback(
        tmp_path_factory: pytest.TempPathFactory, capsys: pytest.CaptureFixture[str], option: str,
        value: str) -> None:
    where = tmp_path_factory.mktemp("cli-times")
    value = value.replace("\x00", "")  # argv cannot carry NUL
    argv = (["analyze", "--once", "--replay", str(where / "none"), "--store", str(where / "o.db")]
            if option == "--replay-start" else
            ["sim", "history", "--scenario", str(where / "none.yaml"), "--out", str(where / "out")])
    argv.append(f"{option}={value}")
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 2
    err = capsys.readouterr().err
    assert code in (0, 1, 2), (argv, err)
    assert "Traceback" not in err, (argv, err)
