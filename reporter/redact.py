"""Keep webhook keys and signing secrets out of logs, errors, reprs and ``outbox list``.

A chat webhook URL *is* a credential (WeCom ``key=``, DingTalk ``access_token=``, the Feishu and
Slack path tokens, a ``user:password@`` before the host), so only its scheme, host and plainly
structural path words are ever shown.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable
from urllib.parse import parse_qsl, quote, quote_plus, unquote, unquote_plus, urlsplit

REDACTED = "***"
_PCT = re.compile(r"%[0-9A-Fa-f]{2}")

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


def encoded_forms(value: str) -> set[str]:
    """Every way ``value`` can appear in a request, a reply or an error text: as is, percent-decoded,
    form-decoded (``+`` for a space), percent-encoded (path or form style) with hex digits in
    either case."""
    forms: set[str] = set()
    for decoded in {value, unquote(value), unquote_plus(value)}:
        forms |= {decoded, quote(decoded, safe=""), quote(decoded),
                  quote_plus(decoded, safe=""), quote_plus(decoded)}
    return forms | {_PCT.sub(lambda m: m.group(0).lower(), f) for f in forms}


def base64_forms(secret: str) -> set[str]:
    """A token or signing secret in base64 (standard and URL-safe, padded or not)."""
    raw = secret.encode()
    forms = {base64.b64encode(raw).decode(), base64.urlsafe_b64encode(raw).decode()}
    return forms | {f.rstrip("=") for f in forms}


def secret_fragments(url: str, *secrets: str | None) -> list[str]:
    """The substrings of ``url`` (and ``secrets``) that must never be printed, in every encoding."""
    fragments = [url, *(s for s in secrets if s)]
    try:
        parts = urlsplit(url)
    except ValueError:
        parts = None
    if parts is not None:
        if parts.password:
            # requests sends user:password from the URL as "Authorization: Basic base64(user:password)",
            # decoded first; a receiver or a proxy may echo either form.
            user, password = unquote(parts.username or ""), unquote(parts.password)
            fragments += [parts.password, f"{user}:{password}", f"{parts.username}:{parts.password}"]
        fragments += [seg for seg in parts.path.split("/") if seg and seg not in _PATH_WORDS]
        fragments += [value for _, value in parse_qsl(parts.query) if value]
        fragments += [value for pair in parts.query.split("&") if (value := pair.partition("=")[2])]
        fragments += [parts.query] if parts.query else []
    found = set().union(*(encoded_forms(f) for f in fragments))
    # base64 of a token or signing secret: how signing code and some receivers carry them
    found |= set().union(*(base64_forms(f) for f in {unquote(f) for f in fragments} | set(fragments)))
    # Longest first, so a whole URL is replaced before its pieces.
    return sorted({f for f in found if len(f) >= 4}, key=len, reverse=True)


def scrub(text: str, fragments: Iterable[str]) -> str:
    """``text`` with every secret fragment replaced by ``***``."""
    for fragment in fragments:
        text = text.replace(fragment, REDACTED)
    return text
