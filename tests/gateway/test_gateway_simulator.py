"""Gateway → real simulator (``oximeter sim serve``): issue 2 "Must show" items 2-5, real processes."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import openai
import requests
from gateway_harness import ReadMetric, StartGateway, StartSim, sim_release

from stack.procs import wait_until

MODEL = "sim-model"
CHAT = "/v1/chat/completions"
LABELS = {"service": "chat", "model": MODEL, "node": "n1"}
ENGINE = {"model_name": MODEL}


def _client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=60)


def _ask(max_tokens: int, **extra: object) -> dict[str, object]:
    return {
        "model": MODEL,
        "messages": [{"role": "user", "content": "hello"}],
        "max_tokens": max_tokens,
        **extra,
    }


def test_openai_client_through_gateway_to_simulator(
    start_sim: StartSim, start_gateway: StartGateway, read_metric: ReadMetric
) -> None:
    sim = start_sim("--model", MODEL, "--decode-s-per-token", "0.001")
    gw = start_gateway(sim)
    client = _client(gw)
    reply = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=5
    )
    assert reply.usage is not None and reply.usage.completion_tokens == 5
    assert len((reply.choices[0].message.content or "").split()) == 5
    stream = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=7, stream=True
    )
    assert sum(1 for c in stream if c.choices and c.choices[0].delta.content) == 7
    # The client stops reading at [DONE]; the gateway counts the answer once the engine's stream ends.
    wait_until(lambda: read_metric(gw, "oximeter_requests_total", route=CHAT, code="200", **LABELS) == 2,
               30, what="both answers counted")
    assert read_metric(gw, "oximeter_output_tokens_total", **LABELS) == 12
    # Both stopped at max_tokens; both carried text.
    assert read_metric(gw, "oximeter_completions_total", finish_reason="length", **LABELS) == 2
    assert read_metric(gw, "oximeter_empty_completions_total", **LABELS) == 0
    assert read_metric(gw, "oximeter_target_info", **LABELS) == 1


def test_streaming_is_unbuffered_shown_by_order(start_sim: StartSim, start_gateway: StartGateway) -> None:
    """The simulator holds after chunk 1 until released; the client already has chunk 1."""
    sim = start_sim("--model", MODEL, "--decode-s-per-token", "0.001")
    gw = start_gateway(sim)
    stream = _client(gw).chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "hi"}],
        max_tokens=4,
        stream=True,
        extra_body={"sim_hold_after_chunks": 1, "sim_hold_key": "order"},
    )
    chunks = iter(stream)
    first = next(chunks)
    assert first.choices[0].delta.content  # chunk 1 arrived while the simulator is holding chunk 2
    sim_release(sim, "order")
    rest = [c for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(rest) == 3


def test_overload_64_clients_only_200_and_429(
    start_sim: StartSim, start_gateway: StartGateway, read_metric: ReadMetric
) -> None:
    # ~1 s per request (20 tokens × 0.05 s, batch-independent) so the 64 arrivals overlap.
    sim = start_sim("--model", MODEL, "--decode-s-per-token", "0.05", "--decode-batch-factor", "0")
    gw = start_gateway(sim, "--max-concurrency", "4", "--max-queue", "8")
    seen: list[tuple[int, str | None]] = []
    lock = threading.Lock()
    start = threading.Barrier(64)

    def call(_i: int) -> None:
        start.wait()
        answer = requests.post(f"{gw}{CHAT}", json=_ask(20), timeout=120)
        with lock:
            seen.append((answer.status_code, answer.headers.get("Retry-After")))

    with ThreadPoolExecutor(64) as pool:
        list(pool.map(call, range(64)))
    ok = sum(1 for code, _ in seen if code == 200)
    refused = [retry for code, retry in seen if code == 429]
    assert ok + len(refused) == 64, sorted({code for code, _ in seen})
    assert refused and all(retry is not None and int(retry) >= 1 for retry in refused)
    assert read_metric(gw, "oximeter_requests_total", code="200") == ok
    assert read_metric(gw, "oximeter_requests_total", code="429") == len(refused)
    assert read_metric(gw, "oximeter_rejected_requests_total") == len(refused)
    # Every admitted request joined the queue at a position ≤ 8: the ≤8 bucket holds them all.
    assert read_metric(gw, "oximeter_queue_length_at_enqueue_count", **LABELS) == ok
    assert read_metric(gw, "oximeter_queue_length_at_enqueue_bucket", le="8.0", **LABELS) == ok
    assert read_metric(sim, "vllm:request_success_total", **ENGINE) == ok + 1  # + the gateway's warm-up


def test_predicted_wait_refuses_while_queue_is_short(
    start_sim: StartSim, start_gateway: StartGateway, read_metric: ReadMetric
) -> None:
    # 2 s service time (20 tokens × 0.1 s); with 4 slots, queue position p waits ≈ p × 0.5 s.
    sim = start_sim("--model", MODEL, "--decode-s-per-token", "0.1", "--decode-batch-factor", "0")
    gw = start_gateway(sim, "--max-concurrency", "4", "--max-queue", "1000", "--max-queue-wait", "1")
    # One request teaches the gateway the service time, then 24 arrive together.
    assert requests.post(f"{gw}{CHAT}", json=_ask(20), timeout=60).status_code == 200
    start = threading.Barrier(24)
    codes: list[int] = []

    def call(_i: int) -> None:
        start.wait()
        codes.append(requests.post(f"{gw}{CHAT}", json=_ask(20), timeout=120).status_code)

    with ThreadPoolExecutor(24) as pool:
        list(pool.map(call, range(24)))
    refused = codes.count(429)
    assert refused >= 16 and codes.count(200) + refused == 24
    assert read_metric(gw, "oximeter_rejected_requests_total", reason="predicted_wait") == refused
    assert read_metric(gw, "oximeter_rejected_requests_total", reason="queue_full") == 0
    # Refusals began with the queue at most 2 long, nowhere near its 1000 limit.
    admitted = read_metric(gw, "oximeter_queue_length_at_enqueue_count", **LABELS)
    assert admitted == 25 - refused
    assert read_metric(gw, "oximeter_queue_length_at_enqueue_bucket", le="2.0", **LABELS) == admitted


def test_first_byte_timeout_504_and_simulator_counts_one_abort(
    start_sim: StartSim, start_gateway: StartGateway, read_metric: ReadMetric
) -> None:
    # 100 tokens × 0.05 s = 5 s before a non-streamed answer's first byte; the gateway waits 0.5 s.
    sim = start_sim("--model", MODEL, "--decode-s-per-token", "0.05", "--decode-batch-factor", "0")
    gw = start_gateway(sim, "--first-byte-timeout", "0.5")
    answer = requests.post(f"{gw}{CHAT}", json=_ask(100), timeout=60)
    assert answer.status_code == 504
    assert answer.json()["error"]["type"] == "first_byte_timeout"
    wait_until(
        lambda: read_metric(sim, "oximeter_sim_aborted_requests_total") == 1, 30, what="simulator abort"
    )
    wait_until(lambda: read_metric(sim, "vllm:num_requests_running", **ENGINE) == 0, 30, what="engine idle")
    assert read_metric(gw, "oximeter_upstream_aborts_total", reason="first_byte_timeout", **LABELS) == 1
    assert read_metric(gw, "oximeter_requests_total", code="504", **LABELS) == 1


def test_client_disconnect_while_streaming_stops_generation(
    start_sim: StartSim, start_gateway: StartGateway, read_metric: ReadMetric
) -> None:
    # 400 tokens × 0.05 s = 20 s of generation if nobody stopped it.
    sim = start_sim("--model", MODEL, "--decode-s-per-token", "0.05", "--decode-batch-factor", "0")
    gw = start_gateway(sim)
    with requests.post(f"{gw}{CHAT}", json=_ask(400, stream=True), stream=True, timeout=60) as answer:
        assert next(answer.iter_lines()).startswith(b"data: ")  # streaming has begun; now hang up
    wait_until(
        lambda: read_metric(sim, "oximeter_sim_aborted_requests_total") == 1, 30, what="simulator abort"
    )
    wait_until(lambda: read_metric(sim, "vllm:num_requests_running", **ENGINE) == 0, 30, what="engine idle")
    tokens = read_metric(sim, "vllm:generation_tokens_total", **ENGINE)
    # No longer rising: several reads over a few engine iterations (0.05 s each) all agree.
    later = [read_metric(sim, "vllm:generation_tokens_total", **ENGINE) for _ in range(10)]
    assert later == [tokens] * 10
    assert tokens < 1 + 400  # warm-up's 1 token + far fewer than the 400 asked for
    assert read_metric(gw, "oximeter_upstream_aborts_total", reason="client_disconnect", **LABELS) == 1
    wait_until(lambda: read_metric(gw, "oximeter_requests_total", code="499", **LABELS) == 1, 30, what="499")
    assert read_metric(gw, "oximeter_inflight_requests") == 0
