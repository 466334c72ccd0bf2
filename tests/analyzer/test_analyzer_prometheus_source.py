"""The Prometheus source against a real Prometheus backfilled with the same history the frame
source replays: both yield the same anomaly events (must-show 3). Plus chunking under the
11,000-point limit, the raw-PromQL fallback, retries, errors and the auth header."""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import unquote_plus

import numpy as np
import pandas as pd
import pytest
from analyzer_frames import write_history
from pydantic import SecretStr

from analyzer.detection.evaluate import evaluate_signal
from analyzer.service.settings import AnalyzerSettings
from analyzer.signals.catalogue import CATALOGUE, build_catalogue
from analyzer.signals.frame import series_key
from analyzer.signals.raw import RawStore
from analyzer.signals.sources.base import align
from analyzer.signals.sources.frames import FrameSource
from analyzer.signals.sources.matrix import decode_matrix
from analyzer.signals.sources.prometheus import PrometheusSource
from oximeter.errors import DependencyError
from reporter.prom import digest_client
from reporter.settings import DigestSettings
from stack.ports import refusing_port, start_reserved
from stack.procs import ManagedProcess, http_ok

STEP = 15.0
ROWS = 240


def _labels(node: str, gpu: int, **extra: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted({"node": node, "gpu": str(gpu), "gpu_model": "H100", **extra}.items()))


def history_series() -> dict[tuple[str, tuple[tuple[str, str], ...]], np.ndarray]:
    series = {}
    for g in range(4):
        temp = np.full(ROWS, 60.0 + g)
        if g == 2:
            temp[120:] = 90.0
        series[("oximeter_gpu_temperature_celsius", _labels("n1", g))] = temp
    ecc = np.cumsum(np.r_[np.zeros(100), np.full(ROWS - 100, 10.0)])
    series[("oximeter_gpu_ecc_errors_total", _labels("n1", 0, kind="corrected"))] = ecc
    series[("oximeter_gpu_ecc_errors_total", _labels("n1", 1, kind="corrected"))] = np.zeros(ROWS)
    return series


def write_openmetrics(path: Path, series: dict[tuple[str, tuple[tuple[str, str], ...]], np.ndarray],
                      t0: datetime) -> None:
    lines: list[str] = []
    families = (("oximeter_gpu_temperature_celsius", "gauge"), ("oximeter_gpu_ecc_errors", "counter"))
    for family, kind in families:
        lines.append(f"# TYPE {family} {kind}")
        for (name, labels), values in series.items():
            if name.removesuffix("_total") != family:
                continue
            text = ",".join(f'{k}="{v}"' for k, v in labels)
            lines += [f"{name}{{{text}}} {v:g} {t0.timestamp() + i * STEP:.0f}" for i, v in enumerate(values)]
    path.write_text("\n".join([*lines, "# EOF", ""]))


@pytest.fixture
def backfilled(tmp_path: Path,
               start_process: Callable[..., ManagedProcess]) -> Iterator[tuple[str, Path, datetime]]:
    t0 = align(datetime.now(UTC) - timedelta(hours=2), 3600)
    series = history_series()
    write_openmetrics(tmp_path / "history.om", series, t0)
    tsdb = tmp_path / "tsdb"
    subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics", str(tmp_path / "history.om"),
                    str(tsdb)], check=True, capture_output=True, timeout=120)
    frames = tmp_path / "frames"
    frames.mkdir()
    write_history(frames, series, t0, STEP)
    (tmp_path / "prometheus.yml").write_text("global:\n  scrape_interval: 15s\n")
    _, port = start_reserved(lambda port: start_process(
        "prometheus", ["prometheus", f"--config.file={tmp_path / 'prometheus.yml'}",
                       f"--storage.tsdb.path={tsdb}", f"--web.listen-address=127.0.0.1:{port}"]),
        lambda port: http_ok(f"http://127.0.0.1:{port}/-/ready"))
    yield f"http://127.0.0.1:{port}", frames, t0


def test_prometheus_and_frame_sources_give_the_same_events(backfilled: tuple[str, Path, datetime]) -> None:
    url, frames, t0 = backfilled
    prom = PrometheusSource(url, timeout_s=30)
    replay = FrameSource.from_history(frames)
    end = t0 + timedelta(seconds=(ROWS - 1) * STEP)
    for name in ("gpu_temperature", "ecc_corrected_increase"):
        spec = CATALOGUE[name]
        from_prom = evaluate_signal(spec, prom.fetch(spec, t0, end, STEP))
        from_frames = evaluate_signal(spec, replay.fetch(spec, t0, end, STEP))
        assert len(from_prom) == len(from_frames) == 1, name
        a, b = from_prom[0], from_frames[0]
        assert (a.signal, a.labels) == (b.signal, b.labels)
        assert abs((a.onset - b.onset).total_seconds()) <= STEP, name
        assert abs((a.detected_at - b.detected_at).total_seconds()) <= STEP, name
    # No rules are loaded, and the rules API says so: every signal is read through its raw PromQL.
    assert prom.recording_rules() == frozenset() and prom.chosen == {}


@pytest.mark.parametrize(("selector", "gpus", "events"), [('gpu=~"[01]", node="n1"', ["0", "1"], 0),
                                                     ('gpu!~"[01]"', ["2", "3"], 1)])
def test_a_shard_reads_the_series_its_selector_matches_from_either_source(
        backfilled: tuple[str, Path, datetime], selector: str, gpus: list[str], events: int) -> None:
    url, frames, t0 = backfilled
    end = t0 + timedelta(seconds=(ROWS - 1) * STEP)
    spec = CATALOGUE["gpu_temperature"]  # the hot GPU is 2: in the second shard only
    prom = PrometheusSource(url, selector=selector).fetch(spec, t0, end, STEP)
    replay = FrameSource(raw=RawStore.from_history(frames).only(selector)).fetch(spec, t0, end, STEP)
    for got in (prom, replay):
        assert sorted(got.labels_of(str(c))["gpu"] for c in got.values.columns) == gpus
        assert len(evaluate_signal(spec, got)) == events


def test_chunks_stay_under_the_point_limit(backfilled: tuple[str, Path, datetime]) -> None:
    url, _, t0 = backfilled
    spec = CATALOGUE["gpu_temperature"]
    end = t0 + timedelta(seconds=(ROWS - 1) * STEP)
    whole = PrometheusSource(url).fetch(spec, t0, end, STEP)
    chunked = PrometheusSource(url, max_points=50).fetch(spec, t0, end, STEP)
    pd.testing.assert_frame_equal(chunked.values.sort_index(axis=1), whole.values.sort_index(axis=1))
    assert whole.values.shape == (ROWS, 4)
    assert whole.labels["gpu=2,gpu_model=H100,node=n1"] == {"gpu": "2", "gpu_model": "H100", "node": "n1"}


def test_unreachable_store_is_a_dependency_error_after_retries() -> None:
    with refusing_port() as port:
        source = PrometheusSource(f"http://user:pw@127.0.0.1:{port}", retries=2, backoff_s=0.01, timeout_s=2)
        now = datetime.now(UTC)
        with pytest.raises(DependencyError, match="failed after 3 tries") as info:
            source.fetch(CATALOGUE["gpu_temperature"], now - timedelta(minutes=5), now, STEP)
    assert "pw" not in str(info.value)


class Canned(BaseHTTPRequestHandler):
    """Answers every query with a fixed body; records headers and bodies."""

    status = 200
    body: ClassVar[dict[str, object]] = {}
    seen: ClassVar[list[tuple[dict[str, str], str]]] = []
    rules: ClassVar[list[str] | None] = None  # recording rules on GET /api/v1/rules; None: 404
    rule_reads: ClassVar[int] = 0

    def do_GET(self) -> None:
        Canned.rule_reads += 1
        if Canned.rules is None or not self.path.startswith("/api/v1/rules"):
            self.send_error(404)
            return
        groups = [{"name": "g", "rules": [{"name": n, "type": "recording"} for n in Canned.rules]}]
        payload = json.dumps({"status": "success", "data": {"groups": groups}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        Canned.seen.append((dict(self.headers), self.rfile.read(length).decode()))
        payload = json.dumps(Canned.body).encode()
        self.send_response(Canned.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def canned() -> Iterator[str]:
    server = HTTPServer(("127.0.0.1", 0), Canned)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    # Every field a test may set, reset: the tests of this module run on whichever worker is free,
    # in any order, so one test's 400 must not answer the next one.
    Canned.status, Canned.body, Canned.seen, Canned.rules, Canned.rule_reads = 200, {}, [], None, 0
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_bad_query_names_the_error_and_sends_the_token(canned: str) -> None:
    Canned.status = 400
    Canned.body = {"status": "error", "errorType": "bad_data", "error": "parse error at 1"}
    source = PrometheusSource(canned, token=SecretStr("s3cret"), retries=0)
    now = datetime.now(UTC)
    with pytest.raises(DependencyError, match="HTTP 400: parse error at 1") as info:
        source.fetch(CATALOGUE["gpu_temperature"], now - timedelta(minutes=5), now, STEP)
    assert "s3cret" not in str(info.value)
    headers, form = Canned.seen[0]
    assert headers["Authorization"] == "Bearer s3cret" and "X-Scope-OrgID" not in headers
    assert "step=15" in form and "query=max+without" in form


def test_nan_and_inf_strings_are_read(canned: str) -> None:
    start = align(datetime.now(UTC), 60) - timedelta(minutes=1)
    ts = start.timestamp()
    Canned.status = 200
    Canned.body = {"status": "success", "data": {"resultType": "matrix", "result": [
        {"metric": {"__name__": "x", "node": "n1"},
         "values": [[ts, "NaN"], [ts + 15, "+Inf"], [ts + 45, "2.5"]]}]}}
    end = start + timedelta(seconds=45)
    got = PrometheusSource(canned).fetch(CATALOGUE["gpu_temperature"], start, end, STEP)
    column = got.values["node=n1"].tolist()
    assert np.isnan(column[0]) and column[1] == np.inf and np.isnan(column[2]) and column[3] == 2.5


def test_from_settings_reads_the_token_and_the_tenant_from_the_env(canned: str,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OXIMETER_TEST_PROM_TOKEN", "from-env")
    monkeypatch.setenv("OXIMETER_TEST_PROM_TENANT", "team-a|team-b")  # Mimir's federated tenants
    Canned.status = 200
    Canned.body = {"status": "success", "data": {"resultType": "matrix", "result": []}}
    settings = AnalyzerSettings.model_validate(
        {"prometheus": {"url": canned, "bearer_token_env": "OXIMETER_TEST_PROM_TOKEN",
                        "tenant_env": "OXIMETER_TEST_PROM_TENANT", "retries": 0}})
    source = PrometheusSource.from_settings(settings.prometheus)
    now = datetime.now(UTC)
    got = source.fetch(CATALOGUE["queue_wait_p99"], now - timedelta(minutes=1), now, STEP)
    assert got.values.columns.empty
    # The recording rule answered nothing, so the raw PromQL was tried next; both with the token
    # and the tenant.
    assert [(h["Authorization"], h["X-Scope-OrgID"]) for h, _ in Canned.seen] == [
        ("Bearer from-env", "team-a|team-b")] * 2
    assert "queue_wait_seconds%3Ap99_5m" in Canned.seen[0][1] and "histogram_quantile" in Canned.seen[1][1]
    # The digest queries through the same client, with its own section's token and tenant.
    digest = DigestSettings(prometheus_url=canned, prometheus_bearer_token_env="OXIMETER_TEST_PROM_TOKEN",
                            prometheus_tenant_env="OXIMETER_TEST_PROM_TENANT")
    assert digest_client(digest).range("up", now - timedelta(minutes=1), now, STEP) == []
    headers, form = Canned.seen[2]
    assert (headers["Authorization"], headers["X-Scope-OrgID"]) == ("Bearer from-env", "team-a|team-b")
    assert "query=up" in form
    # A refused query's error names neither.
    Canned.status = 401
    Canned.body = {"status": "error", "errorType": "unauthorized", "error": "no org id"}
    with pytest.raises(DependencyError, match="HTTP 401") as info:
        source.fetch(CATALOGUE["gpu_temperature"], now - timedelta(minutes=1), now, STEP)
    assert "team-a" not in str(info.value) and "from-env" not in str(info.value)


def reference_decode(answers: Sequence[Sequence[Mapping[str, Any]]], grid: pd.DatetimeIndex,
                     step_s: float) -> tuple[pd.DataFrame, dict[str, dict[str, str]]]:
    """The obvious decode, one sample at a time: later samples overwrite earlier ones."""
    columns: dict[str, list[float]] = {}
    labels: dict[str, dict[str, str]] = {}
    origin_s = grid[0].timestamp()
    for results in answers:
        for result in results:
            metric = {k: v for k, v in result["metric"].items() if k != "__name__"}
            key = series_key(metric)
            column = columns.setdefault(key, [float("nan")] * len(grid))
            labels.setdefault(key, metric)
            for stamp, text in result.get("values", []):
                row = round((stamp - origin_s) / step_s)
                if 0 <= row < len(grid):
                    column[row] = float(text)
    frame = pd.DataFrame({k: np.array(v, dtype=np.float32) for k, v in columns.items()}, index=grid)
    return frame, labels


GRID0_S = 1_764_633_600.0


def _result(gpu: int, points: list[tuple[int, str]], name: str = "x") -> dict[str, Any]:
    return {"metric": {"__name__": name, "node": "n1", "gpu": str(gpu)},
            "values": [[GRID0_S + row * STEP, text] for row, text in points]}


# Two chunks as a store might answer them: gaps, NaN and ±Inf strings, a series twice in one chunk
# (same labels once __name__ is dropped), series in a different order in each chunk, a timestamp
# answered by both chunks, samples off the grid, and a series with no samples.
CHUNKS = [
    [_result(0, [(0, "1.5"), (1, "NaN"), (3, "4")]),
     _result(1, [(0, "+Inf"), (2, "-Inf"), (5, "7")]),
     _result(1, [(2, "8"), (6, "9")], name="y")],
    [_result(2, [(-1, "5"), (4, "6"), (8, "1")]),
     _result(1, []),
     _result(0, [(3, "40"), (4, "1e3"), (7, "0.1")])],
]


def test_vectorised_decode_matches_the_sample_by_sample_reference() -> None:
    grid = pd.date_range(pd.Timestamp(GRID0_S, unit="s", tz="UTC"), periods=8, freq="15s")
    got = decode_matrix(CHUNKS, grid, STEP)
    want, labels = reference_decode(CHUNKS, grid, STEP)
    pd.testing.assert_frame_equal(got.values, want)
    assert got.labels == labels
    assert list(got.values.columns) == ["gpu=0,node=n1", "gpu=1,node=n1", "gpu=2,node=n1"]
    nan = float("nan")
    expect = {"gpu=0,node=n1": [1.5, nan, nan, 40.0, 1000.0, nan, nan, np.float32(0.1)],
              "gpu=1,node=n1": [np.inf, nan, 8.0, nan, nan, 7.0, 9.0, nan],
              "gpu=2,node=n1": [nan, nan, nan, nan, 6.0, nan, nan, nan]}
    for key, column in expect.items():
        np.testing.assert_array_equal(got.values[key].to_numpy(), np.array(column, dtype=np.float32), key)


def test_a_loaded_rule_is_read_before_it_has_samples(canned: str) -> None:
    # A fresh Prometheus (or no traffic yet): the rule exists but has produced nothing. The raw
    # PromQL would answer, but with the rule's windows unscaled or its history different; once
    # chosen it used to stick for the daemon's life. The rules API decides instead, read once.
    spec = CATALOGUE["queue_wait_p99"]
    Canned.rules = [str(spec.record), "some:other:rule"]
    Canned.body = {"status": "success", "data": {"resultType": "matrix", "result": []}}
    source = PrometheusSource(canned, retries=0)
    now = datetime.now(UTC)
    for _ in range(2):
        assert source.fetch(spec, now - timedelta(minutes=1), now, STEP).values.columns.empty
    assert [form for _, form in Canned.seen] and all("p99_5m" in form for _, form in Canned.seen)
    assert len(Canned.seen) == 2 and Canned.rule_reads == 1 and source.chosen == {}
    # A signal whose rule the store does not evaluate goes straight to its raw PromQL.
    Canned.seen = []
    source.fetch(CATALOGUE["gpu_temperature"].model_copy(update={"record": "not:loaded:rule"}),
                 now - timedelta(minutes=1), now, STEP)
    assert len(Canned.seen) == 1 and "max+without" in Canned.seen[0][1]


def test_a_configured_query_is_read_although_the_store_has_the_shipped_rule(canned: str) -> None:
    # The store evaluates the shipped rule for queue wait; the user configured a query of their own.
    # Reading the rule would judge the shipped query under the configured signal's name.
    shipped = CATALOGUE["queue_wait_p99"]
    Canned.rules = [str(shipped.record)]
    Canned.body = {"status": "success", "data": {"resultType": "matrix", "result": []}}
    mine = build_catalogue({"queue_wait_p99": {"promql": "max by (service, node) (my_queue_wait)"}})
    now = datetime.now(UTC)
    PrometheusSource(canned, retries=0).fetch(mine["queue_wait_p99"], now - timedelta(minutes=1), now, STEP)
    assert len(Canned.seen) == 1 and "my_queue_wait" in unquote_plus(Canned.seen[0][1])


def test_decode_of_nothing_is_an_empty_frame_on_the_grid() -> None:
    grid = pd.date_range(pd.Timestamp(GRID0_S, unit="s", tz="UTC"), periods=4, freq="15s")
    nothing: list[list[list[dict[str, Any]]]] = [[], [[]], [[], []]]
    for answers in nothing:
        got = decode_matrix(answers, grid, STEP)
        assert got.values.columns.empty and got.values.index.equals(grid) and got.labels == {}


def test_every_chunk_answer_is_decoded(canned: str) -> None:
    start = datetime.fromtimestamp(GRID0_S, UTC)
    end = start + timedelta(seconds=7 * STEP)
    Canned.status = 200
    Canned.body = {"status": "success", "data": {"resultType": "matrix", "result": CHUNKS[1]}}
    got = PrometheusSource(canned, max_points=4).fetch(CATALOGUE["gpu_temperature"], start, end, STEP)
    # 8 steps at 3 per request: 3 requests, each answered with the same body (so overlapping stamps).
    assert len(Canned.seen) == 3
    want, labels = reference_decode([CHUNKS[1]] * 3, got.values.index, STEP)
    pd.testing.assert_frame_equal(got.values, want)
    assert got.labels == labels
