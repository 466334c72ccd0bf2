"""Keep webhook keys and signing secrets out of logs, errors, reprs and ``outbox list``.

A chat webhook URL *is* a credential (WeCom ``key=``, DingTalk ``access_token=``, the Feishu and
Slack path tokens), so only its scheme, host and plainly structural path words are ever shown.
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import parse_qsl, unquote, urlsplit

REDACTED = "***"

# Only the services' structural path words are shown; any other segment may be a token (Feishu and
# Slack put theirs in the path), so it is hidden.
_PATH_WORDS = frozenset({
    "cgi-bin", "webhook", "send", "open-apis", "bot", "v2", "hook", "services", "robot", "api",
    "hooks", "webhooks", "wecom", "feishu", "lark", "dingtalk", "slack", "notify", "alert", "alerts",
})


def redact_url(url: str) -> str:
    """``url`` with every query value and every token-like path segment replaced by ``***``."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return REDACTED
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    segments = parts.path.split("/")
    path = "/".join(seg if (not seg or seg in _PATH_WORDS) else REDACTED for seg in segments)
    query = "&".join(f"{name}={REDACTED}" for name, _ in parse_qsl(parts.query, keep_blank_values=True))
    return f"{parts.scheme}://{host}{path}" + (f"?{query}" if query else "")


def secret_fragments(url: str, *secrets: str | None) -> list[str]:
    """The substrings of ``url`` (and ``secrets``) that must never be printed."""
    fragments = [url, *(s for s in secrets if s)]
    try:
        parts = urlsplit(url)
    except ValueError:
        return fragments
    fragments += [seg for seg in parts.path.split("/") if seg and seg not in _PATH_WORDS]
    fragments += [value for _, value in parse_qsl(parts.query) if value]
    fragments += [parts.query, unquote(parts.query)] if parts.query else []
    # Longest first, so a whole URL is replaced before its pieces.
    return sorted({f for f in fragments if len(f) >= 4}, key=len, reverse=True)


def scrub(text: str, fragments: Iterable[str]) -> str:
    """``text`` with every secret fragment replaced by ``***``."""
    for fragment in fragments:
        text = text.replace(fragment, REDACTED)
    return text
