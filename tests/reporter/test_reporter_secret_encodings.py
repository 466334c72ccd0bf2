"""A receiver that echoes the whole request back into the error path: no configured secret reaches
the logs, the outbox store or ``oximeter outbox list`` in any encoding it can take on the way.

The secrets are base64-like (``+``, ``/``, ``=``) and some are configured percent-encoded
(``sign=abc%2Bdef``), so each can show up raw, percent-decoded, form-decoded, re-encoded with
either hex case, or base64-encoded.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus, unquote, unquote_plus

import pytest
import yaml
from loguru import logger
from pydantic import SecretStr
from sample_messages import alert

from oximeter.cli import main
from oximeter.store import connect
from reporter.channels import CHANNELS
from reporter.outbox import Outbox, OutboxPolicy

# What a channel's URL carries (as configured: some percent-encoded) and its signing secret.
URLS = {
    "wecom": "/cgi-bin/webhook/send?key=wk+Ab/Cd%3D%3DEf&sign=abc%2Bdef",
    "feishu": "/open-apis/bot/v2/hook/fs%2BTok%2Fen%3D%3D",
    "dingtalk": "/robot/send?access_token=dt%2BTok%2Fen9%3D&sign=abc%2Bdef",
    "slack": "/services/T0X%2BAb/B0Y/Xs%2Fcr%3Dt9",
    "webhook": "/hooks/wh%2BTok9?sign=abc%2Bdef",
}
SIGNING = {"feishu": "c2Vj+cmV0/ZmVp==", "dingtalk": "SECab+/cd==ding", "webhook": "whsec+/s3cr3t=="}
VALUES = ["wk+Ab/Cd==Ef", "abc+def", "fs+Tok/en==", "dt+Tok/en9=", "T0X+Ab", "Xs/cr=t9", "wh+Tok9",
          *SIGNING.values()]


def _hex_lower(text: str) -> str:
    return re.sub(r"%[0-9A-F]{2}", lambda m: m.group(0).lower(), text)


def forms(value: str) -> set[str]:
    """Written independently of ``reporter.redact``: what a server or a library may make of it."""
    out = {value, unquote(value), unquote_plus(value), quote(value, safe=""), quote_plus(value),
           quote(value, safe="/"), base64.b64encode(value.encode()).decode(),
           base64.urlsafe_b64encode(value.encode()).decode().rstrip("=")}
    return out | {_hex_lower(f) for f in out}


FORBIDDEN = sorted(set().union(*(forms(v) for v in VALUES)), key=len, reverse=True)
# Each request is echoed in one of these renderings, in turn.
ECHOES: list[Callable[[str], str]] = [
    lambda t: t, unquote, unquote_plus, lambda t: quote_plus(unquote(t)),
    lambda t: _hex_lower(quote(unquote(t))),
    lambda t: " ".join(base64.b64encode(unquote(p).encode()).decode() for p in re.split(r"[/?&=]", t) if p),
]


def leaks(text: str) -> list[str]:
    return [f for f in FORBIDDEN if len(f) >= 4 and f in text]


class EchoReceiver:
    """Answers every POST with 502 and the request (target, headers) echoed in the next rendering."""

    def __init__(self) -> None:
        self.turn = 0
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with receiver.lock:
                    echo = ECHOES[receiver.turn % len(ECHOES)]
                    receiver.turn += 1
                headers = " ".join(f"{k}={v}" for k, v in self.headers.items())
                payload = f"echo {echo(self.path)} {echo(headers)}".encode()
                self.send_response(502)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True)

    def url(self, service: str) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}{URLS[service]}"

    def __enter__(self) -> EchoReceiver:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def log_records() -> Iterator[list[str]]:
    records: list[str] = []
    sink = logger.add(lambda message: records.append(str(message)), level="DEBUG", serialize=True)
    yield records
    with contextlib.suppress(ValueError):  # the in-process CLI set up its own logging (removing ours)
        logger.remove(sink)


def test_the_forbidden_forms_are_really_distinct() -> None:
    # Guards the test itself: percent-, form- and base64-encoded secrets differ from the raw ones.
    assert {"abc%2Bdef", "abc%2bdef", "abc+def", "abc def", "YWJjK2RlZg=="} <= set(FORBIDDEN)


def test_no_secret_in_any_encoding_reaches_logs_store_or_cli(
        tmp_path: Path, log_records: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "oximeter.db"
    with EchoReceiver() as receiver:
        channels = {service: cls(service, SecretStr(receiver.url(service)),
                                 SecretStr(SIGNING[service]) if service in SIGNING else None,
                                 clock=itertools.count(0.0, 600.0).__next__)  # never rate-limited here
                    for service, cls in CHANNELS.items()}
        outbox = Outbox(connect(store), channels, OutboxPolicy(max_attempts=1))
        for i in range(len(ECHOES)):
            outbox.enqueue(alert(f"incident-{i}:opened:1"), now=time.time())
        while outbox.deliver_due(time.time()):
            pass
        assert receiver.turn >= len(ECHOES) * len(CHANNELS)
    errors = [row.last_error or "" for row in outbox.rows()]
    assert len(errors) == len(ECHOES) * len(CHANNELS) and all("echo" in e for e in errors)
    assert leaks("\n".join(errors)) == []
    dump = "\n".join(" ".join(map(str, row)) for row in sqlite3.connect(store).execute(
        "SELECT * FROM outbox"))
    assert "echo" in dump and leaks(dump) == []
    assert log_records and leaks("\n".join(log_records)) == []

    config = tmp_path / "oximeter.yaml"
    config.write_text(yaml.safe_dump({"reporter": {"store_path": str(store)}}))
    for extra in ([], ["--json"]):
        assert main(["--config", str(config), "outbox", "list", *extra]) == 0
        out = capsys.readouterr()
        assert "failed" in out.out and leaks(out.out + out.err) == []
    assert len(json.loads(out.out)) == len(errors)


class AuthEchoReceiver(EchoReceiver):
    """Answers every POST with 502 and the request's Authorization header, raw or decoded, in turn."""

    def __init__(self) -> None:
        super().__init__()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with receiver.lock:
                    turn = receiver.turn
                    receiver.turn += 1
                auth = self.headers.get("Authorization", "")
                if turn % 2:
                    auth = base64.b64decode(auth.removeprefix("Basic ")).decode()
                payload = f"echo Authorization: {auth}".encode()
                self.send_response(502)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server.RequestHandlerClass = Handler


def test_a_password_in_the_webhook_url_stays_hidden_with_its_basic_auth_form(
        tmp_path: Path, log_records: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    # requests turns the URL's user:password into "Authorization: Basic base64(user:password)", which
    # the receiver echoes back into the error the outbox stores, logs and lists.
    store = tmp_path / "oximeter.db"
    password, basic = "Pa%40ss", base64.b64encode(b"user:Pa@ss").decode()
    forbidden = sorted(forms(password) | forms("Pa@ss") | {basic, basic.rstrip("=")}, key=len, reverse=True)
    with AuthEchoReceiver() as receiver:
        url = receiver.url("webhook").replace("http://", f"http://user:{password}@")
        channel = CHANNELS["webhook"]("hook", SecretStr(url), clock=itertools.count(0.0, 600.0).__next__)
        outbox = Outbox(connect(store), {"hook": channel}, OutboxPolicy(max_attempts=1))
        for i in range(4):
            outbox.enqueue(alert(f"incident-{i}:opened:1"), now=time.time())
        while outbox.deliver_due(time.time()):
            pass
    errors = "\n".join(row.last_error or "" for row in outbox.rows())
    assert "echo Authorization: Basic ***" in errors and "echo Authorization: ***" in errors
    rows = sqlite3.connect(store).execute("SELECT * FROM outbox")
    dump = "\n".join(" ".join(map(str, row)) for row in rows)
    config = tmp_path / "oximeter.yaml"
    config.write_text(yaml.safe_dump({"reporter": {"store_path": str(store)}}))
    assert main(["--config", str(config), "outbox", "list", "--json"]) == 0
    listed = capsys.readouterr()
    assert "failed" in listed.out
    for where, text in (("stored errors", errors), ("store", dump), ("logs", "\n".join(log_records)),
                        ("outbox list", listed.out + listed.err), ("repr", repr(channel))):
        assert [f for f in forbidden if f in text] == [], where
