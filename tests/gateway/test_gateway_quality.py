"""The gateway process's output-quality counters (finish reason, empty output, stream errors, retries)."""

from __future__ import annotations

from typing import Any

import requests
from gateway_harness import MODEL, ReadMetric, StartGateway, Upstream
from prometheus_client.parser import text_string_to_metric_families

from gateway.answer import FINISH_REASONS, OTHER_FINISH
from gateway.metrics import STREAM_ERROR_REASONS

CHAT = "/v1/chat/completions"
LABELS = {"service": "chat", "model": MODEL, "node": "n1"}


def _ask(gw: str, headers: dict[str, str] | None = None, **fields: Any) -> requests.Response:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "x"}], **fields}
    answer = requests.post(f"{gw}{CHAT}", json=body, headers=headers, timeout=30)
    answer.raise_for_status()
    return answer


def test_finish_reasons_empty_outputs_and_engine_error_events_are_counted(
    upstream: Upstream, start_gateway: StartGateway, read_metric: ReadMetric
) -> None:
    gw = start_gateway(upstream.url)
    # Every label value exists at 0 before the first event, so increase() sees the first one.
    page = requests.get(f"{gw}/metrics", timeout=10).text
    families = {f.name: f for f in text_string_to_metric_families(page)}
    reasons = {s.labels["finish_reason"] for s in families["oximeter_completions"].samples
               if s.labels["model"] == MODEL and s.name.endswith("_total")}
    assert reasons == {*FINISH_REASONS, OTHER_FINISH}
    errors = {s.labels["reason"] for s in families["oximeter_stream_errors"].samples
              if s.labels["model"] == MODEL and s.name.endswith("_total")}
    assert errors == set(STREAM_ERROR_REASONS)
    assert read_metric(gw, "oximeter_empty_completions_total", **LABELS) == 0

    _ask(gw)  # whole answer, "length"
    _ask(gw, stream=True)  # final chunk says "stop"
    _ask(gw, stream=True, test_finish="tool_calls")
    _ask(gw, stream=True, test_finish="made_up_reason")
    _ask(gw, test_empty=True, test_finish="stop")
    _ask(gw, stream=True, test_empty=True)
    errored = _ask(gw, stream=True, test_error_event=True)
    assert '"error"' in errored.text  # passed to the client as the engine sent it

    def finished(reason: str) -> float:
        return read_metric(gw, "oximeter_completions_total", finish_reason=reason, **LABELS)

    assert finished("length") == 1
    assert finished("stop") == 3
    assert finished("tool_calls") == 1
    assert finished(OTHER_FINISH) == 1  # an unknown reason never becomes a label value
    assert read_metric(gw, "oximeter_completions_total", finish_reason="made_up_reason") == 0
    assert read_metric(gw, "oximeter_empty_completions_total", **LABELS) == 2
    assert read_metric(gw, "oximeter_stream_errors_total", reason="engine_error", **LABELS) == 1
    assert read_metric(gw, "oximeter_stream_errors_total", reason="upstream_error", **LABELS) == 0
    # Retries: every route starts at 0, and only a re-sent key counts (the rule in gateway/retries.py:
    # a gateway's default window is 10 s, and these requests all fall within it).
    assert read_metric(gw, "oximeter_retried_requests_total", route=CHAT, **LABELS) == 0
    for _ in range(3):
        _ask(gw, {"Idempotency-Key": "order-7"})  # sent, then re-sent twice
    for _ in range(2):
        _ask(gw, {"X-Request-ID": "req-9"})  # sent, then re-sent once
    for i in range(4):
        _ask(gw, {"X-Request-ID": f"fresh-{i}"})  # ordinary traffic with its own ids
        _ask(gw)  # and without any: never a retry
    assert read_metric(gw, "oximeter_retried_requests_total", route=CHAT, **LABELS) == 3
