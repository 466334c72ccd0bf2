"""The gateway tests' harness: a small OpenAI-shaped upstream, and the callables the fixtures hand out.

Test modules import from here by this module's own name (several test folders have a ``conftest``,
and ``from conftest import`` would resolve to whichever was imported last). The upstream records
what reached it and how many requests it saw abandoned, so tests can check "nothing was forwarded"
and "the gateway aborted" without timing anything. Behaviour is chosen per request by body fields:
``test_chunks`` (stream length), ``test_hold_after`` + ``test_hold_key`` (hold the stream after that
many chunks until ``release(key)``), ``test_hold_before_headers``, ``test_finish`` (the finish
reason reported), ``test_empty`` (chunks without text) and ``test_error_event`` (an error event
ends the stream).
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import requests
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

MODEL = "test-model"


@dataclass
class Upstream:
    """State shared between the upstream thread and the test."""

    url: str = ""
    received: list[tuple[str, bytes]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    aborted: int = 0
    running: int = 0
    loop: asyncio.AbstractEventLoop | None = None
    holds: dict[str, asyncio.Event] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def completions(self) -> list[dict[str, Any]]:
        """Bodies of the completion requests received, warm-up excluded."""
        with self.lock:
            bodies = [json.loads(b) for path, b in self.received if path.endswith("completions")]
        return [b for b in bodies if b.get("messages", [{}])[0].get("content") != "warm-up"]

    def release(self, key: str) -> None:
        """Let a held request continue."""
        assert self.loop is not None
        self.loop.call_soon_threadsafe(self._event(key).set)

    def _event(self, key: str) -> asyncio.Event:
        return self.holds.setdefault(key, asyncio.Event())


def _chunk(i: int, finish: str | None = None, *, empty: bool = False) -> bytes:
    delta = {"content": "" if empty else f"tok{i} "}
    body = {
        "id": "c1",
        "object": "chat.completion.chunk",
        "model": MODEL,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return f"data: {json.dumps(body)}\n\n".encode()


async def answer_completion(state: Upstream, request: web.Request) -> web.StreamResponse:
    raw = await request.read()
    with state.lock:
        state.received.append((request.path, raw))
        state.headers.append(dict(request.headers))
    body = json.loads(raw)
    state.running += 1
    try:
        key = body.get("test_hold_key", "")
        if body.get("test_hold_before_headers"):
            await state._event(key).wait()
        chunks = int(body.get("test_chunks", 3))
        if not body.get("stream"):
            text = "" if body.get("test_empty") else " ".join(f"tok{i}" for i in range(chunks))
            return web.json_response(
                {
                    "id": "c1",
                    "object": "chat.completion",
                    "model": MODEL,
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": text},
                            "finish_reason": body.get("test_finish", "length"),
                        }
                    ],
                    "usage": {"prompt_tokens": 3, "completion_tokens": chunks, "total_tokens": chunks + 3},
                }
            )
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        finish, empty = body.get("test_finish", "stop"), bool(body.get("test_empty"))
        for i in range(chunks):
            await response.write(_chunk(i, finish if i + 1 == chunks else None, empty=empty))
            if i + 1 == body.get("test_hold_after"):
                await state._event(key).wait()
        if body.get("test_error_event"):
            await response.write(b'data: {"error": {"message": "engine failed", "code": 500}}\n\n')
        await response.write(b"data: [DONE]\n\n")
        if body.get("test_hold_after_done"):
            await state._event(key).wait()
        await response.write_eof()
        return response
    except (asyncio.CancelledError, ConnectionResetError):
        state.aborted += 1
        raise
    finally:
        state.running -= 1


async def models(_request: web.Request) -> web.Response:
    return web.json_response({"object": "list", "data": [{"id": MODEL, "object": "model"}]})


StartGateway = Callable[..., str]


ReadMetric = Callable[..., float]


def read_metric_value(url: str, name: str, **labels: str) -> float:
    """The sum of the samples named ``name`` matching ``labels`` on a live ``/metrics`` page."""
    text = requests.get(f"{url}/metrics", timeout=10).text
    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total


SIM_TOKEN = "test-admin-token"
StartSim = Callable[..., str]


def sim_release(sim_url: str, key: str) -> None:
    """Let a request held by ``sim_hold_key`` continue (simulator test hook)."""
    answer = requests.post(
        f"{sim_url}/admin/release/{key}", headers={"Authorization": f"Bearer {SIM_TOKEN}"}, timeout=10
    )
    answer.raise_for_status()
