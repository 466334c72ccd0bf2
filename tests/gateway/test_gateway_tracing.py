"""Trace context and the request log's "finished" line, against the gateway process and a test upstream."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import requests
from gateway_harness import MODEL, StartGateway, Upstream

from gateway.tracecontext import new_trace, parse_traceparent, trace_of
from stack.procs import wait_until

CHAT = "/v1/chat/completions"
VALID = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
# Version 00, lower-case hex: 16-byte trace id, 8-byte parent id, flags (W3C Trace Context).
V00 = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}")


@pytest.mark.parametrize(
    ("value", "trace_id"),
    [
        (VALID, "4bf92f3577b34da6a3ce929d0e0e4736"),
        (f" {VALID}\t", "4bf92f3577b34da6a3ce929d0e0e4736"),  # optional whitespace around the value
        ("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-later", "4bf92f3577b34da6a3ce929d0e0e4736"),
        (None, None),
        ("", None),
        (VALID.upper(), None),  # upper-case hex
        (VALID + "-extra", None),  # version 00 has exactly four fields
        ("ff" + VALID[2:], None),  # version ff is invalid
        ("00-00000000000000000000000000000000-00f067aa0ba902b7-01", None),
        ("00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", None),
        ("00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01", None),  # trace id one digit short
        ("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1", None),
    ],
)
def test_traceparent_parsing(value: str | None, trace_id: str | None) -> None:
    parsed = parse_traceparent(value)
    assert (parsed.trace_id if parsed else None) == trace_id


def test_new_traces_are_valid_and_distinct() -> None:
    traces = [new_trace() for _ in range(1000)]
    assert all(V00.fullmatch(t.traceparent) for t in traces)
    assert all(parse_traceparent(t.traceparent) is not None for t in traces)
    assert len({t.trace_id for t in traces}) == 1000
    assert trace_of("garbage").received is False
    assert trace_of(VALID).traceparent == VALID


def _finished(log_path: Path, request_id: str) -> dict[str, Any]:
    def lines() -> list[dict[str, Any]]:
        parsed = [json.loads(line) for line in log_path.read_text().splitlines() if line.startswith("{")]
        return [p for p in parsed if p.get("request_id") == request_id]

    wait_until(lambda: any(p["message"] == "request finished" for p in lines()), 30, what="finished line")
    found = {p["message"]: p for p in lines()}
    assert found["request received"]["trace_id"] == found["request finished"]["trace_id"]
    return found["request finished"]


def test_trace_is_propagated_or_generated_and_logged_with_tokens_and_upstream(
    upstream: Upstream, start_gateway: StartGateway, tmp_path: Path
) -> None:
    gw = start_gateway(upstream.url, log_format="json")
    log_path = tmp_path / "logs" / "gateway.log"
    message = {"role": "user", "content": "x"}
    body = {"model": MODEL, "messages": [message], "max_tokens": 50, "test_chunks": 4}
    cases = {
        "given": {"traceparent": VALID, "tracestate": "vendor=abc"},
        "missing": {"tracestate": "vendor=abc"},
        "invalid": {"traceparent": VALID.upper(), "tracestate": "vendor=abc"},
    }
    sent: dict[str, dict[str, str]] = {}
    for name, headers in cases.items():
        start = len(upstream.headers)
        headers["X-Request-ID"] = name
        answer = requests.post(f"{gw}{CHAT}", json=body, headers=headers, timeout=30)
        assert answer.status_code == 200
        [sent[name]] = [h for h in upstream.headers[start:] if h.get("X-Request-ID") == name]

    # A valid traceparent reaches the engine unchanged, with its tracestate.
    assert sent["given"]["traceparent"] == VALID
    assert sent["given"]["tracestate"] == "vendor=abc"
    # Missing or invalid: a new valid one, and the orphaned tracestate is not passed on.
    generated = {name: V00.fullmatch(sent[name]["traceparent"]) for name in ("missing", "invalid")}
    for name, match in generated.items():
        assert match is not None
        assert "tracestate" not in sent[name]
        assert _finished(log_path, name)["trace_id"] == match.group(1)
    assert sent["missing"]["traceparent"] != sent["invalid"]["traceparent"]

    given = _finished(log_path, "given")
    assert given["trace_id"] == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert given["model"] == MODEL
    assert given["upstream"] == upstream.url
    # The test upstream reports 3 prompt tokens and one completion token per chunk.
    assert (given["prompt_tokens"], given["max_tokens"], given["output_tokens"]) == (3, 50, 4)
    assert given["finish_reason"] == "length"
