"""The gateway process against a small in-test upstream: pass-through, order, timeouts, aborts, input."""

from __future__ import annotations

import json
import socket
import struct
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import openai
import pytest
import requests
from gateway_harness import MODEL, ReadMetric, StartGateway, Upstream

from stack.procs import wait_until

CHAT = "/v1/chat/completions"


def _client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=60)


def test_openai_client_non_streaming_and_streaming(
    upstream: Upstream, start_gateway: StartGateway, read_metric: ReadMetric
) -> None:
    gw = start_gateway(upstream.url)
    client = _client(gw)
    reply = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], extra_body={"test_chunks": 4}
    )
    assert reply.choices[0].message.content == "tok0 tok1 tok2 tok3"
    stream = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], stream=True, extra_body={"test_chunks": 5}
    )
    assert "".join(c.choices[0].delta.content or "" for c in stream) == "tok0 tok1 tok2 tok3 tok4 "
    labels = {"service": "chat", "model": MODEL, "node": "n1"}
    assert read_metric(gw, "oximeter_requests_total", route=CHAT, code="200", **labels) == 2
    assert read_metric(gw, "oximeter_output_tokens_total", **labels) == 9
    # Only the streamed answer has a first token the gateway can see.
    assert read_metric(gw, "oximeter_time_to_first_token_seconds_count", **labels) == 1
    # 5 chunks + [DONE] in one burst: at most 5 gaps (socket reads may coalesce chunks).
    assert read_metric(gw, "oximeter_inter_token_seconds_count", **labels) <= 5
    assert read_metric(gw, "oximeter_target_info", **labels) == 1
    assert read_metric(gw, "oximeter_requests_total", code="429") == 0


def test_request_id_honoured_or_generated(upstream: Upstream, start_gateway: StartGateway) -> None:
    gw = start_gateway(upstream.url)
    body = {"model": MODEL, "messages": [{"role": "user", "content": "x"}]}
    given = requests.post(f"{gw}{CHAT}", json=body, headers={"X-Request-ID": "req-42"}, timeout=30)
    generated = requests.post(f"{gw}{CHAT}", json=body, timeout=30)
    assert given.headers["X-Request-ID"] == "req-42"
    assert len(generated.headers["X-Request-ID"]) == 32


def test_stream_is_forwarded_before_upstream_continues(
    upstream: Upstream, start_gateway: StartGateway
) -> None:
    """Order, not time: chunk 1 reaches the client while the upstream is still holding chunk 2."""
    gw = start_gateway(upstream.url)
    stream = _client(gw).chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "hi"}],
        stream=True,
        extra_body={"test_chunks": 3, "test_hold_after": 1, "test_hold_key": "order"},
    )
    chunks = iter(stream)
    assert next(chunks).choices[0].delta.content == "tok0 "
    assert upstream.running == 1  # still held upstream: nothing after chunk 1 was produced yet
    upstream.release("order")
    assert [c.choices[0].delta.content for c in chunks] == ["tok1 ", "tok2 "]


def test_first_byte_timeout_gives_504_and_aborts_upstream(
    upstream: Upstream, start_gateway: StartGateway, read_metric: ReadMetric
) -> None:
    gw = start_gateway(upstream.url, "--first-byte-timeout", "0.5")
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "x"}],
        "test_hold_before_headers": True,
        "test_hold_key": "never",
    }
    answer = requests.post(f"{gw}{CHAT}", json=body, timeout=30)
    assert answer.status_code == 504
    assert answer.json()["error"]["type"] == "first_byte_timeout"
    wait_until(lambda: upstream.aborted == 1, 30, what="upstream abort")
    assert read_metric(gw, "oximeter_upstream_aborts_total", reason="first_byte_timeout") == 1
    assert read_metric(gw, "oximeter_requests_total", code="504") == 1
    assert read_metric(gw, "oximeter_inflight_requests") == 0


def test_stream_idle_timeout_sends_error_event_and_aborts(
    upstream: Upstream, start_gateway: StartGateway, read_metric: ReadMetric
) -> None:
    gw = start_gateway(upstream.url, "--stream-idle-timeout", "0.5")
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "x"}],
        "stream": True,
        "test_chunks": 3,
        "test_hold_after": 1,
        "test_hold_key": "idle",
    }
    answer = requests.post(f"{gw}{CHAT}", json=body, timeout=30)
    events = [line[6:] for line in answer.text.splitlines() if line.startswith("data: ")]
    assert answer.status_code == 200
    assert json.loads(events[0])["choices"][0]["delta"]["content"] == "tok0 "
    assert json.loads(events[-1])["error"]["type"] == "stream_idle_timeout"
    assert len(events) == 2
    wait_until(lambda: upstream.aborted == 1, 30, what="upstream abort")
    assert read_metric(gw, "oximeter_upstream_aborts_total", reason="stream_idle_timeout") == 1
    assert read_metric(gw, "oximeter_stream_errors_total", reason="stream_idle_timeout") == 1
    assert read_metric(gw, "oximeter_completions_total") == 0  # a broken stream is not a completion


def test_client_disconnect_while_streaming_aborts_upstream(
    upstream: Upstream, start_gateway: StartGateway, read_metric: ReadMetric
) -> None:
    gw = start_gateway(upstream.url)
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "x"}],
        "stream": True,
        "test_chunks": 3,
        "test_hold_after": 1,
        "test_hold_key": "gone",
    }
    with requests.post(f"{gw}{CHAT}", json=body, stream=True, timeout=30) as answer:
        assert next(answer.iter_lines()).startswith(b"data: ")
    wait_until(lambda: upstream.aborted == 1, 30, what="upstream abort")
    wait_until(lambda: read_metric(gw, "oximeter_requests_total", code="499") == 1, 30, what="499 counted")
    assert read_metric(gw, "oximeter_upstream_aborts_total", reason="client_disconnect") == 1
    assert read_metric(gw, "oximeter_inflight_requests") == 0


def _raw_post(port: int, body: bytes) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    head = (
        f"POST {CHAT} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    sock.sendall(head + body)
    return sock


def test_a_client_that_hangs_up_after_done_has_its_whole_answer(
    upstream: Upstream, start_gateway: StartGateway, read_metric: ReadMetric
) -> None:
    """The OpenAI Python SDK closes a stream at [DONE], before the engine's body ends: that answer
    is complete (200), not a client cut-off (499)."""
    gw = start_gateway(upstream.url)
    address = urlsplit(gw)
    body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "x"}], "stream": True,
                       "test_chunks": 2, "test_hold_after_done": True, "test_hold_key": "done"}).encode()
    with socket.create_connection((address.hostname, address.port), timeout=30) as sock:
        sock.sendall(b"POST " + CHAT.encode() + b" HTTP/1.1\r\nHost: gateway\r\n"
                     b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        got = b""
        while b"data: [DONE]" not in got:
            data = sock.recv(65536)
            assert data, got
            got += data
        # Hung up at once, with a reset: the engine's body has not ended yet (it is held).
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    upstream.release("done")
    wait_until(lambda: read_metric(gw, "oximeter_requests_total", code="200") == 1, 30, what="200 counted")
    assert read_metric(gw, "oximeter_requests_total", code="499") == 0
    assert read_metric(gw, "oximeter_upstream_aborts_total") == 0


def test_client_disconnect_while_queued_leaves_queue_as_499(
    upstream: Upstream, start_gateway: StartGateway, read_metric: ReadMetric
) -> None:
    gw = start_gateway(upstream.url, "--max-concurrency", "1")
    port = int(gw.rsplit(":", 1)[1])
    held = json.dumps(
        {
            "model": MODEL,
            "messages": [{"role": "user", "content": "x"}],
            "test_hold_before_headers": True,
            "test_hold_key": "slot",
        }
    ).encode()
    first = _raw_post(port, held)
    wait_until(lambda: read_metric(gw, "oximeter_inflight_requests") == 1, 30, what="first admitted")
    assert read_metric(gw, "oximeter_queue_wait_seconds_count") == 1  # admitted at once
    second = _raw_post(
        port, json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "y"}]}).encode()
    )
    wait_until(lambda: read_metric(gw, "oximeter_queue_length") == 1, 30, what="second queued")
    # The engine holds the first request's head and the second waits: both ages grow at once.
    wait_until(lambda: read_metric(gw, "oximeter_queue_oldest_wait_seconds") > 0, 30, what="queue age")
    assert read_metric(gw, "oximeter_upstream_oldest_unanswered_seconds") > 0
    second.close()
    wait_until(lambda: read_metric(gw, "oximeter_queue_length") == 0, 30, what="queue left")
    assert read_metric(gw, "oximeter_requests_total", code="499") == 1
    # The wait that ended unserved is observed, as long as it lasted.
    assert read_metric(gw, "oximeter_queue_wait_seconds_count") == 2
    assert read_metric(gw, "oximeter_queue_wait_seconds_sum") > 0
    assert read_metric(gw, "oximeter_queue_oldest_wait_seconds") == 0
    upstream.release("slot")
    assert first.recv(12) == b"HTTP/1.1 200"
    first.close()
    wait_until(lambda: read_metric(gw, "oximeter_upstream_oldest_unanswered_seconds") == 0, 30,
               what="first byte")
    assert [b["messages"][0]["content"] for b in upstream.completions()] == ["x"]


CASES: list[tuple[str, bytes, dict[str, str], int, str]] = [
    ("not json", b"{model: nope", {}, 400, "invalid_json"),
    ("json array", b"[1, 2]", {}, 400, "invalid_json"),
    ("declared too large", b"{}" + b" " * 5000, {}, 413, "body_too_large"),
    ("chunked too large", b"{}" + b" " * 5000, {"Transfer-Encoding": "chunked"}, 413, "body_too_large"),
]


@pytest.mark.parametrize(("name", "body", "headers", "status", "reason"), CASES, ids=[c[0] for c in CASES])
def test_malformed_input_is_refused_and_never_forwarded(
    upstream: Upstream,
    start_gateway: StartGateway,
    read_metric: ReadMetric,
    name: str,
    body: bytes,
    headers: dict[str, str],
    status: int,
    reason: str,
) -> None:
    gw = start_gateway(upstream.url, "--max-body-bytes", "4096")
    data: Any = iter([body[:100], body[100:]]) if headers.get("Transfer-Encoding") else body
    answer = requests.post(
        f"{gw}{CHAT}", data=data, headers={"Content-Type": "application/json", **headers}, timeout=30
    )
    assert answer.status_code == status
    assert answer.json()["error"]["type"] == reason
    assert upstream.completions() == []
    assert read_metric(gw, "oximeter_rejected_requests_total", reason=reason) == 1
    assert read_metric(gw, "oximeter_requests_total", code=str(status)) == 1


def test_overload_gives_only_200_and_429_with_retry_after(
    upstream: Upstream, start_gateway: StartGateway, read_metric: ReadMetric
) -> None:
    """Held upstream: exactly 4 run, 8 queue, the other 52 get 429 at once; counts match the metrics."""
    gw = start_gateway(upstream.url, "--max-concurrency", "4", "--max-queue", "8", "--max-queue-wait", "1000")
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "x"}],
        "test_hold_before_headers": True,
        "test_hold_key": "burst",
    }
    seen: list[tuple[int, str | None]] = []
    lock = threading.Lock()

    def call(_i: int) -> None:
        answer = requests.post(f"{gw}{CHAT}", json=body, timeout=60)
        with lock:
            seen.append((answer.status_code, answer.headers.get("Retry-After")))

    with ThreadPoolExecutor(64) as pool:
        futures = [pool.submit(call, i) for i in range(64)]
        wait_until(lambda: len(seen) == 52, 60, what="52 refusals")
        assert read_metric(gw, "oximeter_queue_length") == 8
        upstream.release("burst")
        for f in futures:
            f.result()
    codes = sorted(code for code, _ in seen)
    assert codes == [200] * 12 + [429] * 52
    assert all(retry is not None and int(retry) >= 1 for code, retry in seen if code == 429)
    assert read_metric(gw, "oximeter_requests_total", code="200") == 12
    assert read_metric(gw, "oximeter_requests_total", code="429") == 52
    assert read_metric(gw, "oximeter_rejected_requests_total", reason="queue_full") == 52
    assert read_metric(gw, "oximeter_queue_length_at_enqueue_count") == 12
    assert read_metric(gw, "oximeter_queue_length_at_enqueue_bucket", le="8.0") == 12
    assert read_metric(gw, "oximeter_queue_length_at_enqueue_bucket", le="0.0") == 4


def test_four_json_log_points_per_request(
    upstream: Upstream, start_gateway: StartGateway, tmp_path: Path
) -> None:
    """Four points per request: received (body size), enqueued (queue length), started (wait), finished."""
    gw = start_gateway(upstream.url, log_format="json")
    message = {"role": "user", "content": "x"}
    body = json.dumps({"model": MODEL, "messages": [message], "stream": True}).encode()
    headers = {"X-Request-ID": "log-1", "Content-Type": "application/json"}
    requests.post(f"{gw}{CHAT}", data=body, headers=headers, timeout=30)
    log_path = tmp_path / "logs" / "gateway.log"

    def lines() -> list[dict[str, Any]]:
        parsed = [json.loads(line) for line in log_path.read_text().splitlines() if line.startswith("{")]
        return [p for p in parsed if p.get("request_id") == "log-1"]

    wait_until(lambda: any(p["message"] == "request finished" for p in lines()), 30, what="finished line")
    found = {p["message"]: p for p in lines()}
    assert list(found) == ["request received", "request enqueued", "request started", "request finished"]
    assert found["request received"]["body_bytes"] == len(body)
    assert found["request enqueued"]["queue_length"] == 0
    assert found["request started"]["wait_ms"] >= 0
    finished = found["request finished"]
    assert finished["status"] == 200
    assert finished["total_ms"] >= finished["upstream_ms"] > 0
    assert finished["ttft_ms"] > 0
    assert all(p["level"] == "INFO" and p["component"] == "gateway" for p in found.values())


def test_engine_dying_mid_stream_gives_error_event_and_502(
    start_gateway: StartGateway, read_metric: ReadMetric
) -> None:
    """An engine that closes its connection in the middle of a stream: the client gets what was sent,
    then an SSE error event; the request is counted as a 502 with an upstream_error abort."""
    listener = socket.create_server(("127.0.0.1", 0))
    first = b'data: {"choices":[{"delta":{"content":"tok0"}}]}\n\n'

    def engine() -> None:
        conn, _ = listener.accept()
        with conn:
            received = b""
            while b"\r\n\r\n" not in received:
                received += conn.recv(65536)
            conn.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
                + f"{len(first):x}\r\n".encode()
                + first
                + b"\r\n"
            )

    thread = threading.Thread(target=engine, daemon=True)
    thread.start()
    try:
        gw = start_gateway(f"http://127.0.0.1:{listener.getsockname()[1]}", "--no-warmup")
        body = {"model": MODEL, "messages": [{"role": "user", "content": "x"}], "stream": True}
        answer = requests.post(f"{gw}{CHAT}", json=body, timeout=30)
    finally:
        thread.join(10)
        listener.close()
    assert answer.status_code == 200  # the head went out before the engine died
    events = [line for line in answer.text.split("\n\n") if line]
    assert events[0].encode() + b"\n\n" == first
    assert json.loads(events[-1].removeprefix("data: "))["error"]["type"] == "upstream_error"
    assert read_metric(gw, "oximeter_requests_total", code="502") == 1
    assert read_metric(gw, "oximeter_upstream_aborts_total", reason="upstream_error") == 1
    assert read_metric(gw, "oximeter_stream_errors_total", reason="upstream_error") == 1
    assert read_metric(gw, "oximeter_inflight_requests") == 0
