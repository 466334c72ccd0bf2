"""OpenAI-compatible request parsing and response shapes (chat and legacy completions).

Pure functions: the HTTP layer passes JSON in and writes what these return, so the shapes are
testable without a server. Field names follow OpenAI's and vLLM's wire format.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

_WORDS = (
    "lorem",
    "ipsum",
    "dolor",
    "sit",
    "amet",
    "consectetur",
    "adipiscing",
    "elit",
    "sed",
    "do",
    "eiusmod",
    "tempor",
    "incididunt",
    "ut",
    "labore",
    "et",
    "dolore",
    "magna",
    "aliqua",
)


# vLLM's default max_tokens is "the rest of the context"; any large bound behaves the same here.
UNLIMITED_TOKENS = 4096


class RequestError(ValueError):
    """A request the engine rejects with 400; the message names the field."""


@dataclass(frozen=True)
class GenRequest:
    """What the engine needs from a request, plus the simulator-only test hooks."""

    chat: bool
    model: str
    stream: bool
    prompt_tokens: int
    max_tokens: int
    stop_tokens: int | None
    include_usage: bool
    hold_after_chunks: int | None
    hold_key: str | None


def _count_tokens(text: str) -> int:
    # About four characters per token for English text, as tokenizers average.
    return max(1, (len(text) + 3) // 4)


def _int_field(body: dict[str, Any], key: str, minimum: int) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise RequestError(f"{key}: expected an integer >= {minimum}, got {value!r}")
    return value


def parse_request(body: Any, *, chat: bool, default_output_tokens: int) -> GenRequest:
    """Validate a request body; RequestError says which field is wrong."""
    if not isinstance(body, dict):
        raise RequestError("body: expected a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise RequestError("model: required string")
    if chat:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise RequestError("messages: expected a non-empty list")
        prompt = 0
        for i, message in enumerate(messages):
            if not isinstance(message, dict) or "role" not in message:
                raise RequestError(f"messages[{i}]: expected an object with a role")
            content = message.get("content") or ""
            if isinstance(content, list):
                content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
            # Chat templates add a few tokens of framing per message.
            prompt += _count_tokens(str(content)) + 4
    else:
        raw = body.get("prompt")
        if isinstance(raw, str):
            prompt = _count_tokens(raw)
        elif isinstance(raw, list) and raw and all(isinstance(t, int) for t in raw):
            prompt = len(raw)
        else:
            raise RequestError("prompt: expected a string or a list of token ids")
    max_tokens = _int_field(body, "max_completion_tokens", 1) or _int_field(body, "max_tokens", 1)
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise RequestError("stream: expected a boolean")
    options = body.get("stream_options") or {}
    hold_after = _int_field(body, "sim_hold_after_chunks", 0)
    hold_key = body.get("sim_hold_key")
    if hold_key is not None and (not isinstance(hold_key, str) or not hold_key):
        raise RequestError("sim_hold_key: expected a non-empty string")
    if hold_after is not None and hold_key is None:
        raise RequestError("sim_hold_after_chunks needs sim_hold_key")
    return GenRequest(
        chat=chat,
        model=model,
        stream=stream,
        prompt_tokens=prompt,
        # Without max_tokens the "model" ends naturally (finish_reason "stop").
        max_tokens=max_tokens if max_tokens is not None else max(UNLIMITED_TOKENS, default_output_tokens),
        stop_tokens=None if max_tokens is not None else default_output_tokens,
        include_usage=bool(isinstance(options, dict) and options.get("include_usage")),
        hold_after_chunks=(hold_after or 0) if hold_key is not None else None,
        hold_key=hold_key,
    )


def token_text(i: int) -> str:
    """The i-th generated token's text (one word each, so tokens are countable by clients)."""
    return " " + _WORDS[i % len(_WORDS)]


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    """OpenAI's usage object."""
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def response_id(req: GenRequest, seq_id: int, node: str) -> str:
    """``chatcmpl-…`` or ``cmpl-…``, unique within the simulation."""
    return f"{'chatcmpl' if req.chat else 'cmpl'}-sim{node}x{seq_id}"


def full_response(
    req: GenRequest, rid: str, text: str, finish_reason: str, completion_tokens: int
) -> dict[str, Any]:
    """A non-streaming response body."""
    created = int(time.time())
    if req.chat:
        choice: dict[str, Any] = {
            "index": 0,
            "message": {"role": "assistant", "content": text},
            "logprobs": None,
            "finish_reason": finish_reason,
        }
        obj = "chat.completion"
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}
        obj = "text_completion"
    return {
        "id": rid,
        "object": obj,
        "created": created,
        "model": req.model,
        "choices": [choice],
        "usage": usage(req.prompt_tokens, completion_tokens),
    }


def chunk(
    req: GenRequest, rid: str, text: str | None, finish_reason: str | None, *, first: bool
) -> dict[str, Any]:
    """One streaming chunk: a token (``text``) or the final one (``finish_reason``)."""
    created = int(time.time())
    if req.chat:
        delta: dict[str, Any] = {}
        if first:
            delta["role"] = "assistant"
        if text is not None:
            delta["content"] = text
        choice: dict[str, Any] = {
            "index": 0,
            "delta": delta,
            "logprobs": None,
            "finish_reason": finish_reason,
        }
        obj = "chat.completion.chunk"
    else:
        choice = {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish_reason}
        obj = "text_completion"
    return {"id": rid, "object": obj, "created": created, "model": req.model, "choices": [choice]}


def usage_chunk(req: GenRequest, rid: str, completion_tokens: int) -> dict[str, Any]:
    """The last chunk: no choices, usage filled (OpenAI's ``stream_options.include_usage`` shape)."""
    obj = "chat.completion.chunk" if req.chat else "text_completion"
    return {
        "id": rid,
        "object": obj,
        "created": int(time.time()),
        "model": req.model,
        "choices": [],
        "usage": usage(req.prompt_tokens, completion_tokens),
    }


def models_list(model: str, max_model_len: int) -> dict[str, Any]:
    """``GET /v1/models``."""
    return {
        "object": "list",
        "data": [
            {
                "id": model,
                "object": "model",
                "created": int(time.time()),
                "owned_by": "oximeter-simulator",
                "root": model,
                "parent": None,
                "max_model_len": max_model_len,
            }
        ],
    }


def error_body(message: str, status: int) -> dict[str, Any]:
    """OpenAI's error shape."""
    kind = {400: "BadRequestError", 404: "NotFoundError", 503: "ServiceUnavailableError"}.get(status, "Error")
    return {
        "object": "error",
        "message": message,
        "type": kind,
        "param": None,
        "code": status,
        "error": {"message": message, "type": kind, "code": status},
    }
