"""Fuzzing as tests: random API parameters and bodies, CLI arguments, configuration and scenario files.

Asserted: no 500 and the API keeps serving; CLI exit codes 0, 1 or 2 and never a traceback; a bad
file is a ``ConfigError`` naming it. The default budget keeps the suite fast; set
``OXIMETER_FUZZ_EXAMPLES`` (e.g. 5000) for a long run.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from api_server import ApiServer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import SecretStr

from analyzer.incidents.store import IncidentStore
from analyzer.service.api import build_app
from oximeter.cli import main
from oximeter.config import load_config
from oximeter.errors import ConfigError
from oximeter.store import connect
from simulator.scenario import load_scenario

EXAMPLES = int(os.environ.get("OXIMETER_FUZZ_EXAMPLES", "0"))
FUZZ = settings(max_examples=EXAMPLES or 100, deadline=None, derandomize=not EXAMPLES,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
TOKEN = "fuzz-token"

# Text a client can put in a URL or JSON (no lone surrogates), biased towards the edge cases.
TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)
NUMBERISH = st.from_regex(r"\A-?[0-9]{1,30}(\.[0-9]{1,5})?(ms|[smhdwy]|e[0-9]{1,4})?\Z")
DURATIONISH = st.from_regex(r"\A-?([0-9]{1,25}(ms|[smhdwy])){1,3}\Z")
EDGE_VALUES = ["", "0", "-1", "nan", "inf", "\x00", "²", "٣h", "999999999999999d", "99999999999999999999",
               "1e400s", "9999-12-31T23:59:59Z", "0001-01-01", "-2h", "1.5"]
EDGES = st.sampled_from(EDGE_VALUES)
VALUE = st.one_of(EDGES, NUMBERISH, DURATIONISH, EDGES, TEXT)
FINITE = st.floats(allow_nan=False, allow_infinity=False)  # what JSON can carry
JSON = st.recursive(st.none() | st.booleans() | st.integers() | FINITE | TEXT | NUMBERISH,
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
                    max_leaves=8)


KEY = st.sampled_from(["since", "from", "to", "limit", "layer", "state", "service", "node", "rule",
                       "severity", "gpu"])


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    store = IncidentStore(connect(tmp_path_factory.mktemp("fuzz") / "oximeter.db"))
    server = ApiServer(build_app(store, SecretStr(TOKEN)))
    yield server
    server.stop()
    store.conn.close()


def _still_serving(api: ApiServer) -> None:
    assert api.session.get(api.url("/openapi.json"), timeout=10).status_code == 200


@FUZZ
@given(path=st.sampled_from(["/api/incidents", "/api/annotations", "/api/incidents/inc-1"]),
       params=st.one_of(st.tuples(KEY, EDGES).map(lambda kv: dict([kv])),
                        st.dictionaries(KEY | TEXT, VALUE, max_size=4)))
def test_api_queries_never_500(api: ApiServer, path: str, params: dict[str, str]) -> None:
    answer = api.session.get(api.url(path), params=params, timeout=10)
    assert answer.status_code < 500, (params, answer.text)
    if answer.status_code >= 400:
        assert answer.json()["error"]


@FUZZ
@given(path=st.sampled_from(["/api/incidents/inc-1/ack", "/api/incidents/inc-1/silence", "/api/changes"]),
       body=st.one_of(JSON, st.dictionaries(
           st.sampled_from(["by", "note", "for", "until", "kind", "description", "labels", "at"]),
           st.one_of(VALUE, JSON), max_size=5)),
       raw=st.booleans())
def test_api_bodies_never_500(api: ApiServer, path: str, body: Any, raw: bool) -> None:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    if raw:  # the JSON text as bytes, maybe cut short
        data = yaml.safe_dump(body).encode()[:50]
        answer = api.session.post(api.url(path), data=data, headers=headers, timeout=10)
    else:
        answer = api.session.post(api.url(path), json=body, headers=headers, timeout=10)
    assert answer.status_code < 500, (body, answer.text)
    _still_serving(api)


def test_every_edge_value_in_every_api_input(api: ApiServer) -> None:
    # The edges above, exhaustively: the random tests reach each combination only by chance.
    for value in EDGE_VALUES:
        for path in ("/api/incidents", "/api/annotations"):
            for key in ("since", "from", "to", "limit", "node"):
                answer = api.session.get(api.url(path), params={key: value}, timeout=10)
                assert answer.status_code < 500, (path, key, value, answer.text)
        for path in ("/api/incidents/inc-1/silence", "/api/changes"):
            for key in ("for", "until", "at", "labels", "by"):
                body = {"by": "fuzz", "kind": "deploy", "description": "d", key: value}
                answer = api.session.post(api.url(path), json=body, timeout=10,
                                          headers={"Authorization": f"Bearer {TOKEN}"})
                assert answer.status_code < 500, (path, body, answer.text)
    _still_serving(api)


@pytest.fixture(scope="module")
def cli_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("fuzz-cli") / "oximeter.db"
    IncidentStore(connect(path)).conn.close()
    return path


FLAG = st.sampled_from(["--since", "--since", "--layer", "--state", "--node", "--service", "--rule", "--step",
                        "--json", "-x"])
ARGS = st.lists(st.one_of(st.tuples(st.just("--since"), EDGES).map(lambda pair: f"{pair[0]}={pair[1]}"),
                          st.tuples(FLAG, EDGES).map(lambda pair: f"{pair[0]}={pair[1]}"),
                          st.tuples(FLAG, VALUE).map(lambda pair: f"{pair[0]}={pair[1]}"), VALUE),
                max_size=3)


@FUZZ
@given(command=st.sampled_from([["incidents", "list"], ["incidents", "stats"], ["incidents", "show"],
                                ["store", "check"], ["outbox", "list"], ["detect"]]),
       args=ARGS)
@pytest.mark.usefixtures("logs_to_stderr")
def test_cli_arguments_exit_0_1_2_without_traceback(
        cli_store: Path, capsys: pytest.CaptureFixture[str], command: list[str], args: list[str]) -> None:
    if any("\x00" in a for a in args):
        args = [a.replace("\x00", "") for a in args]  # argv cannot carry NUL
    store = ["--store", str(cli_store)]
    argv = ([command[0], *store, *command[1:], *args] if command[0] in ("incidents", "store")
            else [*command, *store, *args] if command[0] == "outbox" else [*command, *args])
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse: usage errors and --help
        code = exc.code if isinstance(exc.code, int) else 2
    err = capsys.readouterr().err
    assert code in (0, 1, 2), (argv, err)
    assert "Traceback" not in err, (argv, err)


@pytest.mark.usefixtures("logs_to_stderr")
def test_every_edge_value_in_every_cli_option(cli_store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for value in EDGE_VALUES:
        for argv in (["list", f"--since={value}"], ["stats", f"--since={value}"],
                     ["list", f"--node={value}"]):
            full = ["incidents", "--store", str(cli_store), *argv]
            try:
                code = main(full)
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 2
            err = capsys.readouterr().err
            assert code in (0, 2) and "Traceback" not in err, (full, err)


SECTIONS = st.dictionaries(
    st.sampled_from(["gateway", "sim", "analyzer", "incidents", "topology", "exporter", "reporter", "other"]),
    st.one_of(JSON, st.dictionaries(st.sampled_from(["port", "store_path", "channels", "interval_s", "since",
                                                     "max_queue", "timezone", "signals"]) | TEXT,
                                    st.one_of(VALUE, JSON), max_size=3)),
    max_size=3)


@FUZZ
@given(content=st.one_of(st.binary(max_size=200), SECTIONS.map(lambda d: yaml.safe_dump(d).encode()),
                         TEXT.map(lambda t: t.encode("utf-16")),
                         SECTIONS.map(lambda d: yaml.safe_dump(d).encode()[:37])))
def test_config_files_are_valid_or_a_config_error(tmp_path_factory: pytest.TempPathFactory,
                                                  content: bytes) -> None:
    path = tmp_path_factory.mktemp("cfg") / "oximeter.yaml"
    path.write_bytes(content)
    for load in (load_config, load_scenario):
        try:
            load(path)
        except ConfigError as exc:
            assert str(path) in str(exc)


@FUZZ
@given(content=st.one_of(st.binary(max_size=120), SECTIONS.map(lambda d: yaml.safe_dump(d).encode())))
def test_config_check_exits_0_or_1(tmp_path_factory: pytest.TempPathFactory,
                                   capsys: pytest.CaptureFixture[str], content: bytes) -> None:
    path = tmp_path_factory.mktemp("cfg") / "oximeter.yaml"
    path.write_bytes(content)
    code = main(["config", "check", str(path)])
    out = capsys.readouterr()
    assert code in (0, 1)
    assert "Traceback" not in out.err and (code == 0 or str(path) in out.err)


CSV_ROW = st.tuples(st.one_of(st.datetimes().map(lambda d: d.isoformat()), TEXT, NUMBERISH),
                    st.one_of(FINITE.map(str), TEXT, EDGES)).map(lambda row: ",".join(row))
CSV = st.lists(CSV_ROW, max_size=30).map(lambda rows: "\n".join(["timestamp,value", *rows]).encode())


@settings(FUZZ, max_examples=EXAMPLES or 40)
@given(content=st.one_of(CSV, st.binary(max_size=200)), step=st.one_of(st.just("auto"), EDGES, DURATIONISH))
@pytest.mark.usefixtures("logs_to_stderr")
def test_detect_input_files_exit_0_1_2_without_traceback(
        tmp_path_factory: pytest.TempPathFactory, capsys: pytest.CaptureFixture[str],
        content: bytes, step: str) -> None:
    path = tmp_path_factory.mktemp("detect") / "series.csv"
    path.write_bytes(content)
    try:
        code = main(["detect", "--input", str(path), f"--step={step}".replace("\x00", "")])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 2
    err = capsys.readouterr().err
    assert code in (0, 1, 2) and "Traceback" not in err, (content[:80], step, err)
