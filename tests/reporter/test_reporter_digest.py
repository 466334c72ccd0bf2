"""Digest arithmetic, day bounds, the once-a-day scheduler and the CLI's error paths."""

from __future__ import annotations

import math
import subprocess
from datetime import UTC, date, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from oximeter.errors import OximeterError
from oximeter.prometheus import Series
from reporter.digest import colour, day_bounds, histogram_quantile
from reporter.digest_capacity import CONCURRENCY_LIMIT, DEMAND, LIMITS, Peak, headroom, n_minus_one
from reporter.digest_schedule import DigestScheduler
from reporter.prom import increases
from reporter.settings import DigestSettings, ReporterSettings
from stack.ports import refusing_port
from stack.procs import oximeter_argv

INF = math.inf
BUCKETS = [(0.1, 50.0), (0.5, 90.0), (1.0, 99.0), (2.0, 100.0), (INF, 100.0)]

QUANTILES: list[tuple[float, list[tuple[float, float]], float | None]] = [
    (0.5, BUCKETS, 0.1 * 50 / 50),  # rank 50 ends the first bucket exactly
    (0.9, BUCKETS, 0.5),
    (0.95, BUCKETS, 0.5 + 0.5 * (95 - 90) / 9),
    (0.99, BUCKETS, 1.0),
    (0.999, BUCKETS, 1.0 + 1.0 * (99.9 - 99) / 1),
    (0.99, [(1.0, 10.0), (INF, 20.0)], 1.0),  # in the +Inf bucket: the highest finite bound
    (0.99, [(1.0, 0.0), (INF, 0.0)], None),  # no observations
    (0.5, [(1.0, 5.0)], None),  # no +Inf bucket
]


@pytest.mark.parametrize(("q", "buckets", "expected"), QUANTILES)
def test_histogram_quantile_as_prometheus(q: float, buckets: list[tuple[float, float]],
                                          expected: float | None) -> None:
    got = histogram_quantile(q, buckets)
    assert got == (None if expected is None else pytest.approx(expected, rel=1e-12))


@pytest.mark.parametrize(("values", "expected"), [
    ([], 0.0), ([5.0], 0.0), ([1.0, 1.0, 4.0], 3.0),
    ([10.0, 12.0, 3.0, 5.0], 2.0 + 3.0 + 2.0),  # a reset counts from zero
    ([0.0, 0.0, 0.0], 0.0),
])
def test_counter_increase(values: list[float], expected: float) -> None:
    points = tuple((60.0 * i, v) for i, v in enumerate(values))
    assert increases([Series((("job", "x"),), points)]) == [({"job": "x"}, expected)]


@pytest.mark.parametrize(("value", "threshold", "expected"), [
    (51.0, 50.0, "red"), (50.0, 50.0, "green"), (None, 50.0, "none"), (math.nan, 50.0, "none")])
def test_colour_is_strictly_over(value: float | None, threshold: float, expected: str) -> None:
    assert colour(value, threshold, "red") == expected


@pytest.mark.parametrize(("day", "hours"), [(date(2025, 3, 30), 23), (date(2025, 10, 26), 25),
                                            (date(2025, 6, 1), 24)])
def test_day_bounds_follow_local_midnights(day: date, hours: int) -> None:
    start, end = day_bounds(day, ZoneInfo("Europe/Berlin"))
    assert (end - start).total_seconds() == hours * 3600
    berlin = ZoneInfo("Europe/Berlin")
    assert start.astimezone(berlin).hour == 0 == end.astimezone(berlin).hour


SHANGHAI = ZoneInfo("Asia/Shanghai")
SCHEDULE: list[tuple[list[datetime], list[date]]] = [
    # 07:59 local is too early; 08:00 sends yesterday's; later ticks that day send nothing more.
    ([datetime(2025, 12, 1, 7, 59, tzinfo=SHANGHAI), datetime(2025, 12, 1, 8, 0, tzinfo=SHANGHAI),
      datetime(2025, 12, 1, 23, 0, tzinfo=SHANGHAI)], [date(2025, 11, 30)]),
    # UTC 00:30 is 08:30 in Shanghai: due although it is still the previous day in UTC.
    ([datetime(2025, 12, 1, 0, 30, tzinfo=UTC)], [date(2025, 11, 30)]),
    # Two mornings, two digests.
    ([datetime(2025, 12, 1, 9, 0, tzinfo=SHANGHAI), datetime(2025, 12, 2, 9, 0, tzinfo=SHANGHAI)],
     [date(2025, 11, 30), date(2025, 12, 1)]),
]


@pytest.mark.parametrize(("ticks", "sent"), SCHEDULE)
def test_scheduler_sends_once_per_local_day(ticks: list[datetime], sent: list[date]) -> None:
    calls: list[date] = []
    settings = ReporterSettings(digest=DigestSettings(timezone="Asia/Shanghai"))
    scheduler = DigestScheduler(settings, calls.append)
    for tick in ticks:
        scheduler.tick(tick)
    assert calls == sent


def test_scheduler_retries_after_a_failure_and_skips_what_was_queued() -> None:
    attempts: list[date] = []

    def flaky(day: date) -> None:
        attempts.append(day)
        if len(attempts) == 1:
            raise OximeterError("prometheus down")

    settings = ReporterSettings(digest=DigestSettings(timezone="UTC", time="06:30"))
    scheduler = DigestScheduler(settings, flaky)
    assert scheduler.tick(datetime(2025, 12, 1, 6, 30, tzinfo=UTC)) is None
    assert scheduler.tick(datetime(2025, 12, 1, 6, 31, tzinfo=UTC)) == date(2025, 11, 30)
    assert attempts == [date(2025, 11, 30)] * 2
    restarted = DigestScheduler(settings, flaky, sent=lambda day: day == date(2025, 11, 30))
    assert restarted.tick(datetime(2025, 12, 1, 7, 0, tzinfo=UTC)) is None
    assert len(attempts) == 2


@pytest.mark.parametrize(("args", "error"), [
    (["--date", "30/11/2025"], "--date: expected YYYY-MM-DD"),
    # The shared client retries (3 by default) before it gives up.
    (["--date", "2025-11-30", "--prometheus", "http://127.0.0.1:{port}"],
     "/api/v1/query: failed after 4 tries: ConnectionError"),
])
def test_report_cli_errors(tmp_path: Path, args: list[str], error: str) -> None:
    with refusing_port() as port:
        argv = [a.replace("{port}", str(port)) for a in args]
        done = subprocess.run(oximeter_argv("report", "--dry-run", "--out", "p", *argv), cwd=tmp_path,
                              capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 1
    assert error in done.stderr
    assert not (tmp_path / "oximeter.db").exists()  # a preview creates no store


class FakeProm:
    """Range results by expression: ``{expr: {(service, node): [values per minute]}}``."""

    def __init__(self, ranges: dict[str, dict[tuple[str, str], list[float]]]) -> None:
        self.ranges = ranges

    def instant(self, expr: str, at: datetime) -> list[Series]:
        return []

    def range(self, expr: str, start: datetime, end: datetime, step_s: float) -> list[Series]:
        t0 = start.timestamp()
        return [Series((("node", node), ("service", service)),
                       tuple((t0 + 60 * i, v) for i, v in enumerate(values)))
                for (service, node), values in sorted(self.ranges.get(expr, {}).items())]


T0 = datetime(2025, 11, 30, tzinfo=UTC)
# (limits per node, demand per node per minute, expected (peak, minute, without largest, largest, holds))
N_MINUS_ONE: list[tuple[dict[str, float], dict[str, list[float]], tuple[float, int, float, str, bool]]] = [
    # Equal limits: the peak (minute 1) exactly fills the nodes left: it holds.
    ({"a": 4, "b": 4}, {"a": [1, 3, 2], "b": [1, 1, 0]}, (4, 1, 4, "a", True)),
    # One request more than the nodes left can take: it does not.
    ({"a": 4, "b": 4}, {"a": [1, 4, 2], "b": [1, 1, 0]}, (5, 1, 4, "a", False)),
    # The largest node is the one lost, whatever its name; a tie of peaks takes the first minute.
    ({"a": 2, "b": 8, "c": 4}, {"a": [6, 0, 6], "b": [0, 0, 0], "c": [0, 0, 0]}, (6, 0, 6, "b", True)),
    # One node: losing it leaves nothing.
    ({"a": 16}, {"a": [0, 1, 0]}, (1, 1, 0, "a", False)),
]


@pytest.mark.parametrize(("limits", "demand", "expected"), N_MINUS_ONE)
def test_n_minus_one_at_the_peak(limits: dict[str, float], demand: dict[str, list[float]],
                                 expected: tuple[float, int, float, str, bool]) -> None:
    prom = FakeProm({
        DEMAND: {("chat", node): values for node, values in demand.items()},
        CONCURRENCY_LIMIT: {("chat", node): [limit] * 3 for node, limit in limits.items()},
    })
    (row,) = n_minus_one(prom, T0, T0, 60.0)
    peak, minute, without, largest, holds = expected
    assert (row.peak_demand, row.at, row.without_largest, row.largest_node, row.holds) == (
        peak, T0.timestamp() + 60 * minute, without, largest, holds)
    assert (row.nodes, row.capacity) == (len(limits), sum(limits.values()))


def test_headroom_charges_node_limits_to_the_services_there() -> None:
    kv, gpu = LIMITS[2][1], LIMITS[3][1]
    prom = FakeProm({
        LIMITS[0][1]: {("chat", "n1"): [0.5, 1.0, 1.0], ("embed", "n2"): [0.1, 0.2, math.nan]},
        kv: {("", "n1"): [0.3, 0.9, 0.2], ("", "n2"): [0.95, 0.1, 0.1]},
        gpu: {("", "n2"): [0.4, 0.7, 0.7]},
    })
    rows = {h.service: h for h in headroom(prom, T0, T0, 60.0, {"chat": {"n1"}, "embed": {"n2"}})}
    t = T0.timestamp()
    assert rows["chat"].concurrency == Peak(1.0, "n1", t + 60)  # the first minute at the peak
    assert rows["chat"].kv_cache == Peak(0.9, "n1", t + 60) and rows["chat"].gpu is None
    assert rows["embed"].concurrency == Peak(0.2, "n2", t + 60)  # NaN (a zero limit) is no peak
    assert (rows["embed"].kv_cache, rows["embed"].gpu) == (Peak(0.95, "n2", t), Peak(0.7, "n2", t + 60))
    assert rows["embed"].queue is None


def test_the_scheduler_sends_no_digest_for_a_day_without_telemetry(tmp_path: Path) -> None:
    from dataclasses import replace

    from oximeter.store import connect
    from reporter.digest import collect
    from reporter.digest_schedule import already_queued, empty, send_unless_empty
    from reporter.outbox import Outbox

    conn = connect(tmp_path / "oximeter.db")
    outbox, day, settings = Outbox(conn), date(2025, 11, 30), ReporterSettings()
    nothing = FakeProm({})
    # The day before a fleet's telemetry began: no request, queue, GPU or incident to report.
    assert send_unless_empty(nothing, None, outbox, day, settings) is None
    assert not already_queued(outbox, day)
    quiet = collect(nothing, None, day, settings.digest, with_chart=False)
    assert empty(quiet) and not empty(replace(quiet, incidents=1))
    assert not empty(replace(quiet, max_queue_length=0.0))
    conn.close()
