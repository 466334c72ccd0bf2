"""``oximeter report --dry-run`` over a real Prometheus backfilled with a simulated day.

The day comes from ``oximeter sim history`` (OpenMetrics → ``promtool tsdb create-blocks-from
openmetrics``); the expected numbers are computed here from the same run's ground-truth Parquet
with pandas, independently of the digest's PromQL.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import os
import shutil
import struct
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from chat_receiver import ChatReceiver
from relay_harness import sample_incident

from analyzer.incident_store import IncidentStore
from oximeter.ports import start_reserved
from oximeter.procs import ManagedProcess, http_ok, oximeter_argv
from oximeter.store import connect

PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
DAY = "2025-11-30"
START = datetime(2025, 11, 30, tzinfo=UTC)
END = START + timedelta(days=1)
STEP_S = 240  # the history's sample step (under the 5 m lookback); the digest evaluates at 1 m
SCENARIO = """
name: digest_day
description: A small day for the digest test.
nodes: 2
gpus_per_node: 1
base_rps: 0.2
gateway: {max_concurrency: 4, max_queue: 100, max_queue_wait_s: 60.0}
faults:
  - {kind: traffic_spike, node: n1, start: -6h, duration: 30m, strength: 20}
  - {kind: ingress_errors, node: n2, start: -10h, duration: 30m, strength: 0.2}
  - {kind: xid, node: n2, gpu: 0, start: -5h, strength: 79}
  - {kind: ecc_storm, node: n2, gpu: 0, start: -4h, duration: 20m, strength: 30}
truth: {layer: scheduling, entity: {node: n1}, rule: capacity_exhausted}
"""


@dataclass(frozen=True)
class Preview:
    """What the dry run wrote, and the ground truth it must match."""

    numbers: dict[str, Any]
    markdown: str
    png: bytes
    truth: pd.DataFrame  # long form: name, labels (dict), ts (epoch s), value
    stdout: str


def _run(argv: list[str], cwd: Path, timeout_s: float = 300) -> str:
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout_s, check=False)
    assert done.returncode == 0, f"{argv[:4]}… failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    return done.stdout


def _truth(history: Path) -> pd.DataFrame:
    series = pd.read_parquet(history / "series.parquet")
    samples = pd.read_parquet(history / "samples.parquet")
    frame = samples.merge(series[["series_id", "name", "labels"]], on="series_id")
    frame["ts"] = frame["timestamp"].astype("int64") / 1e3 if frame["timestamp"].dtype.kind == "i" else (
        frame["timestamp"].map(lambda t: t.timestamp()))
    frame["labels"] = frame["labels"].map(json.loads)
    in_day = (frame["ts"] >= START.timestamp()) & (frame["ts"] <= END.timestamp())
    return frame[in_day].sort_values(["series_id", "ts"]).reset_index(drop=True)


pytestmark = pytest.mark.e2e


@dataclass(frozen=True)
class Day:
    """A Prometheus serving the backfilled day, and the folder with its history and config."""

    root: Path
    url: str


@pytest.fixture(scope="module")
def day(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Day]:
    root = tmp_path_factory.mktemp("digest")
    (root / "scenario.yaml").write_text(SCENARIO)
    _run(oximeter_argv("sim", "history", "--scenario", str(root / "scenario.yaml"), "--days", "1",
                       "--step", f"{STEP_S}s", "--end", str(int(END.timestamp())), "--out", "history"), root)
    _run([PROMTOOL, "tsdb", "create-blocks-from", "openmetrics", "history/history.om", "tsdb"], root)
    (root / "prometheus.yml").write_text("global: {scrape_interval: 1h}\n")
    prometheus, port = start_reserved(lambda port: ManagedProcess("prometheus", [
        PROMETHEUS, f"--config.file={root / 'prometheus.yml'}", f"--storage.tsdb.path={root / 'tsdb'}",
        "--storage.tsdb.retention.time=10y", f"--web.listen-address=127.0.0.1:{port}"],
        root / "logs").start(),
        lambda port: http_ok(f"http://127.0.0.1:{port}/-/ready"))
    try:
        conn = connect(root / "oximeter.db")
        IncidentStore(conn).save([sample_incident(START + timedelta(hours=18))])
        conn.close()
        (root / "oximeter.yaml").write_text(
            "incidents: {store_path: oximeter.db}\n"
            "reporter:\n  store_path: oximeter.db\n  grafana_url: http://grafana.example:3000\n"
            "  channels: {wecom: {type: wecom, url_env: DIGEST_WECOM_URL}}\n"
            f"  digest: {{timezone: UTC, prometheus_url: 'http://127.0.0.1:{port}'}}\n")
        yield Day(root, f"http://127.0.0.1:{port}")
    finally:
        prometheus.stop()


@pytest.fixture(scope="module")
def preview(day: Day) -> Preview:
    stdout = _run(oximeter_argv("--config", "oximeter.yaml", "report", "--dry-run", "--date", DAY,
                                "--out", "preview"), day.root)
    out = day.root / "preview"
    return Preview(json.loads((out / f"digest-{DAY}.json").read_text()),
                   (out / f"digest-{DAY}.md").read_text(), (out / f"digest-{DAY}.png").read_bytes(),
                   _truth(day.root / "history"), stdout)


def _increase(values: np.ndarray) -> float:
    steps = np.diff(values)
    return float(np.where(steps >= 0, steps, values[1:]).sum())


def _increases(truth: pd.DataFrame, name: str) -> list[tuple[dict[str, str], float]]:
    rows = truth[truth["name"] == name]
    return [(group["labels"].iloc[0], _increase(group["value"].to_numpy()))
            for _, group in rows.groupby("series_id")]


def _quantile(q: float, buckets: dict[float, float]) -> float:
    les = sorted(buckets)
    counts = [buckets[le] for le in les]
    rank = q * counts[-1]
    i = next(i for i, c in enumerate(counts) if c >= rank)
    if les[i] == math.inf:
        return les[i - 1]
    low, below = (les[i - 1], counts[i - 1]) if i else (0.0, 0.0)
    return low + (les[i] - low) * (rank - below) / (counts[i] - below)


def test_seed_numbers_match_the_ground_truth(preview: Preview) -> None:
    truth, numbers = preview.truth, preview.numbers
    queue = truth[truth["name"] == "oximeter_queue_length"]
    top = queue.loc[queue["value"].idxmax()]
    assert numbers["max_queue_length"] == top["value"]
    assert numbers["max_queue_where"] == f"node={top['labels']['node']},service={top['labels']['service']}"
    assert numbers["queue_colour"] == ("red" if top["value"] > 50 else "green")

    by_route: dict[str, float] = {}
    for labels, inc in _increases(truth, "oximeter_requests_total"):
        if labels["code"] == "504":
            by_route[labels["route"]] = by_route.get(labels["route"], 0.0) + inc
    expected = sorted(((r, v) for r, v in by_route.items() if v > 0), key=lambda p: (-p[1], p[0]))[:3]
    assert [tuple(p) for p in numbers["top_504_routes"]] == expected
    assert expected and expected[0][1] > 0  # the scenario's edge 504s are there to be counted

    # avg_over_time(stddev(gpu util)[1d:1m]): at each minute, each GPU's latest sample within 5 m.
    util = truth[truth["name"] == "oximeter_gpu_utilization_ratio"]
    grid = pd.DataFrame({"ts": np.arange(START.timestamp(), END.timestamp() + 1, 60.0)})
    latest = [pd.merge_asof(grid, g[["ts", "value"]], on="ts", direction="backward", tolerance=300.0)["value"]
              for _, g in util.groupby("series_id")]
    per_minute = pd.concat(latest, axis=1)
    spread = per_minute.std(axis=1, ddof=0)[per_minute.notna().any(axis=1)].mean()
    assert numbers["gpu_spread"] == pytest.approx(spread, rel=1e-9)
    assert numbers["spread_colour"] == ("yellow" if spread > 0.30 else "green")


def test_slo_and_gpu_health_match_the_ground_truth(preview: Preview) -> None:
    truth, numbers = preview.truth, preview.numbers
    requests = _increases(truth, "oximeter_requests_total")
    good = sum(v for labels, v in requests if labels["code"].startswith("2"))
    eligible = sum(v for labels, v in requests if not labels["code"].startswith("4"))
    buckets: dict[float, float] = {}
    for labels, inc in _increases(truth, "oximeter_time_to_first_token_seconds_bucket"):
        buckets[float(labels["le"])] = buckets.get(float(labels["le"]), 0.0) + inc
    (slo,) = numbers["slo"]
    assert slo["service"] == "chat"
    assert slo["requests"] == pytest.approx(sum(v for _, v in requests), rel=1e-12)
    assert slo["availability"] == pytest.approx(good / eligible, rel=1e-12)
    assert slo["availability_budget_left"] == pytest.approx(1 - (1 - good / eligible) / 0.001, rel=1e-9)
    assert slo["ttft_p99_s"] == pytest.approx(_quantile(0.99, buckets), rel=1e-9)
    assert slo["ttft_share_ok"] == pytest.approx(buckets[1.0] / buckets[math.inf], rel=1e-12)

    health = {g["node"]: g for g in numbers["gpu_health"]}
    xid = {(lab["node"], lab["xid"]): v for lab, v in _increases(truth, "oximeter_gpu_xid_errors_total")}
    ecc = {(lab["node"], lab["kind"]): v for lab, v in _increases(truth, "oximeter_gpu_ecc_errors_total")}
    assert [tuple(p) for p in health["n2"]["xid"]] == [("79", 1.0)] == [
        (x, v) for (n, x), v in sorted(xid.items()) if n == "n2" and v > 0]
    assert health["n2"]["ecc_corrected"] == ecc[("n2", "corrected")] > 0
    assert health["n1"]["xid"] == [] and health["n1"]["ecc_corrected"] == 0


def test_incidents_markdown_and_link(preview: Preview) -> None:
    numbers, markdown = preview.numbers, preview.markdown
    assert (numbers["incidents"], numbers["by_layer"], numbers["by_rule"]) == (
        1, [["infrastructure", 1]], [["thermal_throttle", 1]])
    assert numbers["mttd_s"] == 180.0 and numbers["mttr_s"] is None
    assert numbers["top_signals"] == [["gpu_temperature", 1, 91.0 / 62.0], ["queue_wait_p99", 1, 2.4 / 0.12]]
    start_ms, end_ms = int(START.timestamp() * 1000), int(END.timestamp() * 1000)
    assert f"(http://grafana.example:3000/d/oximeter-overview?from={start_ms}&to={end_ms})" in markdown
    colour = "🔴 RED" if numbers["queue_colour"] == "red" else "🟢 ok"
    assert f"| max queue length | {numbers['max_queue_length']:.4g} (" in markdown and colour in markdown
    assert f"![chart](digest-{DAY}.png)" in markdown
    assert "Daily health digest 2025-11-30" in preview.stdout
    assert numbers["simulated_nodes"] == ["n1", "n2"]  # the simulator's exporters say so
    assert markdown.startswith("# [SIMULATION] [P1] Daily health digest 2025-11-30\n")


def test_chart_is_a_valid_png(preview: Preview) -> None:
    png = preview.png
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    length, kind = struct.unpack(">I4s", png[8:16])
    width, height = struct.unpack(">II", png[16:24])
    assert (length, kind, width, height) == (13, b"IHDR", 1000, 750)
    assert png[-12:] == b"\x00\x00\x00\x00IEND\xaeB`\x82"
    assert 20_000 < len(png) < 2 * 1024 * 1024  # drawn lines, and within WeCom's image limit


def test_report_sends_the_digest_with_its_chart_once(day: Day, receiver: ChatReceiver,
                                                     preview: Preview) -> None:
    env = {**os.environ, "DIGEST_WECOM_URL": receiver.url("wecom")}
    argv = oximeter_argv("--config", "oximeter.yaml", "report", "--date", DAY, "--channel", "wecom")
    for _ in range(2):  # the second run finds the day's digest already sent: nothing new goes out
        done = subprocess.run(argv, cwd=day.root, env=env, capture_output=True, text=True, timeout=120,
                              check=False)
        assert (done.returncode, done.stdout) == (0, "wecom: sent\n"), done.stderr[-2000:]
    kinds = [r.data["msgtype"] for r in receiver.accepted("wecom")]
    assert kinds[-1] == "image" and set(kinds[:-1]) <= {"markdown", "markdown_v2"} and len(kinds) >= 2
    image = receiver.accepted("wecom")[-1].data["image"]
    assert base64.b64decode(image["base64"]) == preview.png
    assert hashlib.md5(preview.png).hexdigest() == image["md5"]
    assert receiver.problems == []
    first = json.dumps(receiver.accepted("wecom")[0].data, ensure_ascii=False)
    assert "Daily health digest 2025-11-30" in first
