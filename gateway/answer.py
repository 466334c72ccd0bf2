"""What an engine's answer says about its own quality, read from its bytes without parsing JSON.

The gateway forwards answers as raw bytes (see ``gateway.forward``), so the few fields it counts
are found with C-level regular-expression scans: the ``usage`` token counts, the choice's
``finish_reason`` (in the body, or the final chunk of a stream), whether any text reached the
client at all, and an error object the engine sent in the middle of a stream.
"""

from __future__ import annotations

import re

# The reasons the OpenAI API and vLLM report; anything else is counted as "other".
FINISH_REASONS = ("stop", "length", "tool_calls", "content_filter", "abort")
OTHER_FINISH = "other"
_KNOWN_FINISH = {reason.encode(): reason for reason in FINISH_REASONS}
_COMPLETION_TOKENS = re.compile(rb'"completion_tokens"\s*:\s*(\d+)')
_PROMPT_TOKENS = re.compile(rb'"prompt_tokens"\s*:\s*(\d+)')
_FINISH_REASON = re.compile(rb'"finish_reason"\s*:\s*"([^"]{1,64})"')
# A set finish reason as compact and as default JSON encoders write it: a substring test first, so
# the regular expression runs only on the one chunk that ends a stream (every chunk has a null one).
_FINISH_SET = (b'"finish_reason":"', b'"finish_reason": "')
# Generated text or a tool call's arguments that is not the empty string.
_TEXT = re.compile(rb'"(?:content|text|arguments)"\s*:\s*"[^"]')
# vLLM reports a failure inside an open stream as an event holding an error object.
_ERROR_EVENT = b'data: {"error"'
_ERROR_OBJECT, _ERROR_OBJECT_SPACED = b'"object":"error"', b'"object": "error"'
USAGE_KEY = b'"completion_tokens"'
SSE_EVENT = b"data: {"
# The event that ends an OpenAI-compatible stream: a client that has it has the whole answer.
DONE_EVENT = b"data: [DONE]"


def output_tokens(data: bytes, events: int) -> int:
    """``usage.completion_tokens`` when the upstream sent it, else one token per SSE event."""
    found = _COMPLETION_TOKENS.findall(data)
    return int(found[-1]) if found else events


def prompt_tokens(data: bytes) -> int | None:
    """``usage.prompt_tokens`` when the upstream sent it."""
    found = _PROMPT_TOKENS.findall(data)
    return int(found[-1]) if found else None


def finish_reason(data: bytes) -> bytes | None:
    """The last ``finish_reason`` set in ``data`` (raw bytes; ``None`` while it is still null)."""
    if _FINISH_SET[0] not in data and _FINISH_SET[1] not in data:
        return None
    found = _FINISH_REASON.findall(data)
    return found[-1] if found else None


def finish_label(reason: bytes | None) -> str:
    """The bounded label value of a finish reason (a missing one is "other" too)."""
    return _KNOWN_FINISH.get(reason, OTHER_FINISH) if reason is not None else OTHER_FINISH


def has_text(data: bytes) -> bool:
    """Whether ``data`` carries some generated text or tool-call arguments."""
    return _TEXT.search(data) is not None


def has_error_event(data: bytes) -> bool:
    """Whether a streamed chunk holds an error the engine reported mid-stream."""
    # Substring tests, not any() over a generator: this runs on every chunk.
    return _ERROR_EVENT in data or _ERROR_OBJECT in data or _ERROR_OBJECT_SPACED in data
