"""Logging is configured for every command: ``--log-level`` filters, ``--log-format json`` writes
one JSON object per line; the gateway's and the exporter's own sinks honour both flags."""

from __future__ import annotations

import argparse
import io
import json
import logging

import pytest
from loguru import logger

import stack.analyze
from gateway.logsink import ThreadedJsonSink
from oximeter.cli import main
from oximeter.logs import setup_stdlib_logging


def _log_twice(args: argparse.Namespace) -> int:
    logger.info("quiet line", cycle=1)
    logger.warning("loud line", cycle=2)
    logger.complete()
    return 0


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_analyze_honours_level_and_format(fmt: str, monkeypatch: pytest.MonkeyPatch,
                                          capfd: pytest.CaptureFixture[str]) -> None:
    # analyze's configure() binds its run(); replacing it keeps the real parser and main()'s set-up.
    monkeypatch.setattr(stack.analyze, "run", _log_twice)
    assert main(["--log-level", "warning", "--log-format", fmt, "analyze"]) == 0
    lines = capfd.readouterr().err.splitlines()
    assert len(lines) == 1, lines
    if fmt == "json":
        record = json.loads(lines[0])["record"]
        assert record["message"] == "loud line"
        assert record["extra"] == {"component": "analyze", "cycle": 2}
    else:
        assert "WARNING" in lines[0] and "analyze: loud line cycle=2" in lines[0]


def test_unknown_level_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--log-level", "loud", "analyze"])
    assert info.value.code == 2
    assert "--log-level" in capsys.readouterr().err


@pytest.mark.parametrize("json_lines", [True, False])
def test_gateway_sink_formats(json_lines: bool) -> None:
    stream = io.StringIO()
    sink = ThreadedJsonSink(stream, json_lines=json_lines)
    sink.put(0.0, "INFO", "request received", {"component": "gateway", "request_id": "r1"})
    sink.stop()
    line = stream.getvalue().strip()
    if json_lines:
        assert json.loads(line) == {"time": "1970-01-01T00:00:00+00:00", "level": "INFO",
                                    "message": "request received", "component": "gateway", "request_id": "r1"}
    else:
        assert line == "1970-01-01 00:00:00.000 INFO     gateway: request received request_id=r1"


def test_exporter_json_lines(capfd: pytest.CaptureFixture[str]) -> None:
    setup_stdlib_logging("WARNING", json=True, component="exporter")
    try:
        logging.getLogger("exporter").info("hidden")
        logging.getLogger("exporter").warning("GPU %d slow", 3)
    finally:
        logging.basicConfig(force=True)
    lines = capfd.readouterr().err.splitlines()
    assert [json.loads(line)["message"] for line in lines] == ["GPU 3 slow"]
    assert json.loads(lines[0])["component"] == "exporter"
