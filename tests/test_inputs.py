"""One validated, bounded parse path per kind of outside value; every failure names its input."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from oximeter.cli import main
from oximeter.inputs import (
    MAX_EPOCH_MS,
    InputValueError,
    parse_duration_s,
    parse_epoch_ms,
    parse_int,
    parse_label_value,
    parse_timestamp,
)


@pytest.mark.parametrize(("text", "seconds"), [
    ("90s", 90), ("15m", 900), ("1.5h", 5400), ("7d", 604800), ("2w", 1209600), ("1d6h", 108000),
    ("500ms", 0.5), ("1h30m", 5400), (" 24h ", 86400), (90, 90), ("90", 90), ("1y", 31536000),
])
def test_durations(text: object, seconds: float) -> None:
    assert parse_duration_s(text) == pytest.approx(seconds)


@pytest.mark.parametrize(("value", "kwargs", "reason"), [
    ("999999999999999d", {}, "since: '999999999999999d' is out of range (at most 100y)"),
    ("1e400", {}, "since: '1e400' is out of range (at most 100y)"),
    ("2h", {"maximum_s": 3600}, "since: '2h' is out of range (at most 1h)"),
    ("-2h", {}, "since: expected a duration that is not negative, got '-2h'"),
    ("5h5h", {}, "since: expected a duration such as 90s, 15m, 24h or 7d, got '5h5h' (a unit repeats)"),
    ("90", {"allow_number": False}, "since: expected a duration such as 90s, 15m, 24h or 7d, got '90'"),
    (True, {}, "since: expected a duration such as 90s, 15m, 24h or 7d, got True"),
    ("nan", {}, "since: expected a duration such as 90s, 15m, 24h or 7d, got 'nan'"),
    ("\u0661h", {}, "since: expected a duration such as 90s, 15m, 24h or 7d, got '\u0661h'"),
    (float("inf"), {}, "since: inf is out of range (at most 100y)"),
])
def test_bad_durations_name_the_input(value: object, kwargs: dict[str, object], reason: str) -> None:
    with pytest.raises(InputValueError) as caught:
        parse_duration_s(value, "since", **kwargs)  # type: ignore[arg-type]
    assert str(caught.value) == reason


def test_negative_durations_where_allowed() -> None:
    assert parse_duration_s("-2h", allow_negative=True) == -7200


def test_epochs_ints_timestamps_labels() -> None:
    assert parse_epoch_ms("0", "from") == datetime(1970, 1, 1, tzinfo=UTC)
    assert parse_epoch_ms(str(MAX_EPOCH_MS), "to").year == 9999
    for bad in ("99999999999999999999", "-1", "1.5", "", "\u00b2"):
        with pytest.raises(InputValueError, match=r"^from: expected epoch milliseconds"):
            parse_epoch_ms(bad, "from")
    assert parse_int(" 42 ", "limit", 1, 100) == 42
    with pytest.raises(InputValueError, match=r"^limit: expected an integer in 1\.\.100, got 101$"):
        parse_int("101", "limit", 1, 100)
    assert parse_timestamp("2026-03-02T10:00:00Z", "at") == datetime(2026, 3, 2, 10, tzinfo=UTC)
    assert parse_timestamp("2026-03-02T10:00:00", "at").tzinfo is UTC
    with pytest.raises(InputValueError, match=r"^at: expected an ISO-8601 time, got '99999-01-01'$"):
        parse_timestamp("99999-01-01", "at")
    assert parse_label_value("node-0", "node") == "node-0"
    for bad, reason in (("a\x00b", "node: contains control characters"),
                        (3, "node: expected a string, got int"),
                        ("x" * 257, "node: longer than 256 characters")):
        with pytest.raises(InputValueError, match=f"^{re.escape(reason)}$"):
            parse_label_value(bad, "node")


@pytest.mark.parametrize(("argv", "named"), [
    (["list", "--since", "999999999999999d"], "since: '999999999999999d' is out of range"),
    (["stats", "--since", "999999999999999d"], "since: '999999999999999d' is out of range"),
    (["list", "--since=-5m"], "since: expected a duration that is not negative"),
    (["list", "--node", "n\x01"], "node: contains control characters"),
])
@pytest.mark.usefixtures("logs_to_stderr")
def test_incidents_cli_refuses_out_of_range_values(
        tmp_path: Path, argv: list[str], named: str, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["incidents", "--store", str(tmp_path / "oximeter.db"), *argv])
    err = capsys.readouterr().err
    assert code == 2
    assert "oximeter incidents: " in err and "Traceback" not in err
    assert named in err
