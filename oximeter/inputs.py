"""One validated parse path per kind of outside value: durations, times, limits, label values, JSON bodies.

Every value that arrives from outside (HTTP query or body, CLI argument, config or scenario file)
goes through one of these, so a bound is checked in one place: an oversized number becomes a
clear ``InputValueError`` naming the input, never an ``OverflowError`` deep in ``datetime`` or SQLite.
Standard library only: the exporter and the simulator use it too.
"""

from __future__ import annotations

import argparse
import json
import math
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from oximeter.errors import OximeterError

# Longer than any window, retention or silence Oximeter has a use for, and far inside what
# ``timedelta`` and ``datetime`` can represent when added to "now".
MAX_DURATION_S = 100 * 365 * 86400.0
# 9999-12-31T23:59:59.999Z: the last instant ``datetime`` can hold.
MAX_EPOCH_MS = 253_402_300_799_999
MAX_TEXT = 64  # characters of a duration or number: anything longer is not one
MAX_LABEL_VALUE = 256
# Times a user may name (change events, silences, replay starts, history ends): the analyzer turns
# them into pandas timestamps, which end in 2262, and adds windows of up to MAX_DURATION_S to them.
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(2100, 1, 1, tzinfo=UTC)
# Deeper than any request Oximeter or an OpenAI-compatible engine reads (a tool's JSON schema is
# a dozen levels), and shallow enough that nothing which walks the value recursively can overflow.
MAX_JSON_DEPTH = 64
_SURROGATE = re.compile("[\ud800-\udfff]")
_T = TypeVar("_T")

_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0, "y": 31536000.0}
_PART = r"([0-9]+(?:\.[0-9]+)?)(ms|[smhdwy])"
_DURATION = re.compile(rf"(-)?((?:{_PART})+)")
_PART_RE = re.compile(_PART)
_INT = re.compile(r"-?[0-9]+", re.ASCII)


class InputValueError(OximeterError, ValueError):
    """A value from outside is malformed or out of bounds; the message names the input."""


def parse_duration_s(value: Any, name: str = "duration", *, maximum_s: float = MAX_DURATION_S,
                     allow_negative: bool = False, allow_number: bool = True) -> float:
    """``90``, ``"90s"``, ``"15m"``, ``"1.5h"``, ``"1d6h"``, ``"2w"``, ``"500ms"`` → seconds.

    Bounded by ``maximum_s`` in magnitude; negative only with ``allow_negative``; a bare number
    (seconds) only with ``allow_number``.
    """
    expected = f"{name}: expected a duration such as 90s, 15m, 24h or 7d"
    if isinstance(value, bool):
        raise InputValueError(f"{expected}, got {value!r}")
    if isinstance(value, int | float):
        if not allow_number:
            raise InputValueError(f"{expected}, got the bare number {value!r}")
        seconds = float(value)
    elif isinstance(value, str) and len(value) <= MAX_TEXT:
        text = value.strip()
        match = _DURATION.fullmatch(text)
        if match is None:
            try:
                number = float(text) if allow_number and text[-1:].isdigit() else None
            except ValueError:
                number = None
            if number is None:
                raise InputValueError(f"{expected}, got {value!r}")
            seconds = number
        else:
            units = [unit for _, unit in _PART_RE.findall(match.group(2))]
            if len(set(units)) != len(units):
                raise InputValueError(f"{expected}, got {value!r} (a unit repeats)")
            seconds = sum(float(n) * _UNIT_S[unit] for n, unit in _PART_RE.findall(match.group(2)))
            seconds = -seconds if match.group(1) else seconds
    else:
        shown = value if not isinstance(value, str) else value[:MAX_TEXT] + "..."
        raise InputValueError(f"{expected}, got {shown!r}")
    if not math.isfinite(seconds) or abs(seconds) > maximum_s:
        raise InputValueError(f"{name}: {value!r} is out of range (at most {format_duration(maximum_s)})")
    if seconds < 0 and not allow_negative:
        raise InputValueError(f"{name}: expected a duration that is not negative, got {value!r}")
    return seconds


def format_duration(seconds: float) -> str:
    """A short human form (``30d``, ``6h``, ``90s``) of a bound, for messages."""
    for unit in ("y", "w", "d", "h", "m"):
        if seconds >= _UNIT_S[unit] and seconds % _UNIT_S[unit] == 0:
            return f"{seconds / _UNIT_S[unit]:g}{unit}"
    return f"{seconds:g}s"


def parse_int(value: Any, name: str, lo: int, hi: int) -> int:
    """An integer in ``lo..hi`` (from a string of digits or an int, never a bool or float)."""
    if isinstance(value, str) and len(value) <= MAX_TEXT and _INT.fullmatch(value.strip()):
        number = int(value.strip())
    elif isinstance(value, int) and not isinstance(value, bool):
        number = value
    else:
        shown = value[:MAX_TEXT] if isinstance(value, str) else value
        raise InputValueError(f"{name}: expected an integer in {lo}..{hi}, got {shown!r}")
    if not lo <= number <= hi:
        raise InputValueError(f"{name}: expected an integer in {lo}..{hi}, got {number}")
    return number


def parse_epoch_ms(value: Any, name: str) -> datetime:
    """Epoch milliseconds (as Grafana sends ``from``/``to``) → an aware UTC ``datetime``."""
    try:
        return datetime.fromtimestamp(parse_int(value, name, 0, MAX_EPOCH_MS) / 1000, UTC)
    except InputValueError:
        shown = value[:MAX_TEXT] if isinstance(value, str) else value
        expected = f"expected epoch milliseconds (0..{MAX_EPOCH_MS})"
        raise InputValueError(f"{name}: {expected}, got {shown!r}") from None


def parse_timestamp(value: Any, name: str, *, bounded: bool = True) -> datetime:
    """An ISO-8601 time (``Z`` or an offset; naive means UTC) → an aware ``datetime``.

    ``bounded``: between ``EARLIEST`` and ``LATEST`` (a time a user names); without it, any time
    that has an instant in UTC (another system's sentinels, such as year 1 for "never").
    """
    if not isinstance(value, str) or not 0 < len(value) <= MAX_TEXT:
        raise InputValueError(f"{name}: expected an ISO-8601 time, got {str(value)[:MAX_TEXT]!r}")
    try:
        moment = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        moment = moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
        moment.astimezone(UTC)  # 9999-12-31T23:59:59-14:00 has no instant in UTC
    except ValueError:
        raise InputValueError(f"{name}: expected an ISO-8601 time, got {value!r}") from None
    except OverflowError:
        raise InputValueError(f"{name}: {value!r} is out of range") from None
    if bounded:
        _in_range(moment, name, value)
    return moment


def parse_epoch_s(value: Any, name: str) -> float:
    """Epoch seconds (a number or its text), between ``EARLIEST`` and ``LATEST``."""
    try:
        seconds = float(value) if isinstance(value, str) and len(value) <= MAX_TEXT else None
    except ValueError:
        seconds = None
    if isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    if seconds is None or not math.isfinite(seconds):
        shown = value[:MAX_TEXT] if isinstance(value, str) else value
        raise InputValueError(f"{name}: expected epoch seconds, got {shown!r}")
    if not EARLIEST.timestamp() <= seconds <= LATEST.timestamp():
        raise InputValueError(f"{name}: {value!r} is out of range ({EARLIEST.timestamp():.0f}.."
                              f"{LATEST.timestamp():.0f} epoch seconds)")
    return seconds


def _in_range(moment: datetime, name: str, value: Any) -> None:
    if not EARLIEST <= moment <= LATEST:
        raise InputValueError(f"{name}: {value!r} is out of range ({EARLIEST:%Y-%m-%d} to {LATEST:%Y-%m-%d})")


def cli_type(parse: Callable[[Any, str], _T], name: str) -> Callable[[str], _T]:
    """An argparse ``type=`` from a parser above: a bad value is a usage error (exit 2) naming ``name``."""
    def convert(text: str) -> _T:
        try:
            return parse(text, name)
        except InputValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    convert.__name__ = name  # argparse names the type in some messages
    return convert


def parse_json(body: bytes | str, name: str = "body", *, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """JSON text from outside → Python values, or an ``InputValueError`` naming ``name``.

    Refused: text that is not UTF-8 or not JSON, nesting deeper than ``max_depth``, and strings
    holding a lone surrogate (``"\\ud800"`` is valid JSON but no valid text: it cannot be stored,
    logged or sent on as UTF-8). The size is the caller's to cap before reading the body.
    """
    try:
        data = json.loads(body)
    except UnicodeDecodeError:
        raise InputValueError(f"{name}: not UTF-8 text") from None
    except RecursionError:
        raise InputValueError(f"{name}: JSON nested deeper than {max_depth} levels") from None
    except ValueError as exc:
        raise InputValueError(f"{name}: malformed JSON ({exc})") from None
    # Iterative, so the check itself cannot overflow the stack.
    stack: list[tuple[Any, int]] = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, str):
            if _SURROGATE.search(value):
                raise InputValueError(f"{name}: a string holds an invalid (lone surrogate) character")
        elif isinstance(value, dict | list):
            if depth > max_depth:
                raise InputValueError(f"{name}: JSON nested deeper than {max_depth} levels")
            items = [*value.keys(), *value.values()] if isinstance(value, dict) else value
            stack.extend((item, depth + 1) for item in items)
    return data


def parse_moment(value: Any, name: str, now: datetime) -> datetime:
    """A point in time: ISO-8601/RFC 3339 (``2026-11-01``, ``2026-11-01T08:00:00Z``), ``now``, or
    a duration that far before ``now`` (``7d``: a week ago), the way on-call asks "since when"."""
    if isinstance(value, str) and value.strip() == "now":
        return now
    try:
        return now - timedelta(seconds=parse_duration_s(value, name, allow_number=False))
    except InputValueError:
        pass
    try:
        return parse_timestamp(value, name)
    except InputValueError:
        shown = value[:MAX_TEXT] if isinstance(value, str) else value
        raise InputValueError(f"{name}: expected an ISO-8601 time (2026-11-01, 2026-11-01T08:00:00Z), "
                              f"now, or a duration ago (7d), got {shown!r}") from None


def parse_label_value(value: Any, name: str, *, max_len: int = MAX_LABEL_VALUE) -> str:
    """A label value: a string of printable characters, at most ``max_len`` long."""
    if not isinstance(value, str):
        raise InputValueError(f"{name}: expected a string, got {type(value).__name__}")
    if len(value) > max_len:
        raise InputValueError(f"{name}: longer than {max_len} characters")
    if not value.isprintable():
        raise InputValueError(f"{name}: contains control characters")
    return value
