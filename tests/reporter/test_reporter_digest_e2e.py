"""``oximeter report --dry-run`` over a real Prometheus backfilled with a simulated day.

The day comes from ``oximeter sim history`` (OpenMetrics → ``promtool tsdb create-blocks-from
openmetrics``); the expected numbers are computed here from the same run's ground-truth Parquet
with pandas, independently of the digest's PromQL. The analyzer's own anomaly gauge is not part of
a simulated history, so a known pattern of it is added to the OpenMetrics before the backfill.
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
import requests
import yaml
from chat_receiver import ChatReceiver, delivered_chart
from relay_harness import ThreadedApp, sample_incident

from analyzer.incidents.store import IncidentStore
from analyzer.service.api import build_app
from oximeter.store import connect
from reporter import chart_link
from reporter.channels import CHANNELS
from stack.ports import start_reserved
from stack.procs import ManagedProcess, http_ok, oximeter_argv

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


# The analyzer's ``oximeter_anomalies_active``: (signal, layer, hours before END, minutes, events).
ANOMALIES = (("queue_wait_p99", "scheduling", 6, 30, 2), ("gpu_temperature", "infrastructure", 3, 10, 1))


def _add_anomalies(om: Path) -> None:
    """Append the analyzer's gauge, one sample a minute (0 outside the pattern), before ``# EOF``."""
    text = om.read_text()
    assert text.endswith("# EOF\n")
    lines = ["# TYPE oximeter_anomalies_active gauge\n"]
    for signal, layer, hours, minutes, events in ANOMALIES:
        first = END.timestamp() - hours * 3600
        labels = f'{{signal="{signal}",layer="{layer}",job="oximeter-analyzer",instance="analyzer:9471"}}'
        for ts in range(int(START.timestamp()), int(END.timestamp()) + 1, 60):
            value = events if first <= ts < first + minutes * 60 else 0
            lines.append(f"oximeter_anomalies_active{labels} {value} {ts}\n")
    # Its ``oximeter_series_learning``: GPU temperature's series learnt their day but three, new
    # for the day's last two hours.
    lines.append("# TYPE oximeter_series_learning gauge\n")
    labels = '{signal="gpu_temperature",job="oximeter-analyzer",instance="analyzer:9471"}'
    for ts in range(int(END.timestamp()) - 2 * 3600, int(END.timestamp()) + 1, 60):
        lines.append(f"oximeter_series_learning{labels} 3 {ts}\n")
    om.write_text(text[: -len("# EOF\n")] + "".join(lines) + "# EOF\n")


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
    _add_anomalies(root / "history" / "history.om")
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


def _per_minute(truth: pd.DataFrame, name: str) -> list[tuple[dict[str, str], pd.Series]]:
    """Each series of ``name`` at the digest's one-minute steps: its latest sample within 5 m."""
    grid = pd.DataFrame({"ts": np.arange(START.timestamp(), END.timestamp() + 1, 60.0)})
    rows = truth[truth["name"] == name]
    assert not rows.empty, name
    return [(g["labels"].iloc[0], pd.merge_asof(grid, g[["ts", "value"]], on="ts", direction="backward",
                                                tolerance=300.0).set_index("ts")["value"])
            for _, g in rows.groupby("series_id")]


def _by_node(truth: pd.DataFrame, name: str) -> dict[str, pd.Series]:
    """``max by (node)`` of ``name`` per minute."""
    frames: dict[str, list[pd.Series]] = {}
    for labels, values in _per_minute(truth, name):
        frames.setdefault(labels["node"], []).append(values)
    return {node: pd.concat(parts, axis=1).max(axis=1) for node, parts in frames.items()}


def _peak(per_node: dict[str, pd.Series]) -> dict[str, Any]:
    """The highest value, at its first minute, on the first node by name (the digest's tie order)."""
    ratio, at, node = min((-v, t, n) for n, values in per_node.items() for t, v in values.dropna().items())
    return {"ratio": -ratio, "node": node, "at": at}


def test_headroom_and_n_minus_one_match_the_ground_truth(preview: Preview) -> None:
    truth, numbers = preview.truth, preview.numbers
    inflight, queue = _by_node(truth, "oximeter_inflight_requests"), _by_node(truth, "oximeter_queue_length")
    limit = _by_node(truth, "oximeter_concurrency_limit")
    queue_limit = _by_node(truth, "oximeter_queue_limit")
    expected: dict[str, dict[str, Any]] = {
        "concurrency": _peak({n: inflight[n] / limit[n] for n in limit}),
        "queue": _peak({n: v / queue_limit[n] for n, v in queue.items()}),
        "kv_cache": _peak(_by_node(truth, "vllm:kv_cache_usage_perc")),
        "gpu": _peak(_by_node(truth, "oximeter_gpu_utilization_ratio")),
    }
    (headroom,) = numbers["headroom"]
    assert headroom["service"] == "chat"
    for key in ("concurrency", "queue", "kv_cache", "gpu"):
        got, want = headroom[key], expected[key]
        assert (got["node"], got["at"]) == (want["node"], want["at"]), key
        assert got["ratio"] == pytest.approx(want["ratio"], rel=1e-12), key
    # The spike on n1 fills its concurrency limit and queues behind it.
    assert headroom["concurrency"]["ratio"] == 1.0 and headroom["concurrency"]["node"] == "n1"
    assert headroom["queue"]["ratio"] > 0

    demand = pd.concat([inflight[n] + queue[n] for n in inflight], axis=1).sum(axis=1, min_count=1).dropna()
    peak_at = demand[demand == demand.max()].index.min()
    capacity = {n: v.max() for n, v in limit.items()}
    largest = min(capacity, key=lambda n: (-capacity[n], n))
    without = sum(capacity.values()) - capacity[largest]
    assert numbers["n_minus_one"] == [{
        "service": "chat", "nodes": 2, "peak_demand": demand.max(), "at": peak_at,
        "capacity": sum(capacity.values()), "largest_node": largest, "without_largest": without,
        "holds": bool(demand.max() <= without)}]
    assert (sum(capacity.values()), without, demand.max() > without) == (8.0, 4.0, True)

    markdown = preview.markdown
    assert "| service | concurrency | queue | KV cache | GPU |" in markdown
    assert "| chat | 🔴 100 % (n1 " in markdown
    assert ("**N-1 does not hold**: the fleet could not carry the day's peak with one node down (chat)"
            in markdown)
    assert f"| chat | 2 | {demand.max():.0f} | " in markdown
    assert "| 4 (without n1) | 🔴 does not hold |" in markdown
    assert "N-1 does not hold" in preview.stdout and "Headroom at the peak" in preview.stdout


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


def test_services_and_gpu_health_match_the_ground_truth(preview: Preview) -> None:
    truth, numbers = preview.truth, preview.numbers
    requests = _increases(truth, "oximeter_requests_total")
    buckets: dict[float, float] = {}
    for labels, inc in _increases(truth, "oximeter_time_to_first_token_seconds_bucket"):
        buckets[float(labels["le"])] = buckets.get(float(labels["le"]), 0.0) + inc
    (service,) = numbers["services"]
    assert service["service"] == "chat"
    assert service["requests"] == pytest.approx(sum(v for _, v in requests), rel=1e-12)
    assert service["ttft_p99_s"] == pytest.approx(_quantile(0.99, buckets), rel=1e-9)

    health = {g["node"]: g for g in numbers["gpu_health"]}
    xid = {(lab["node"], lab["xid"]): v for lab, v in _increases(truth, "oximeter_gpu_xid_errors_total")}
    ecc = {(lab["node"], lab["kind"]): v for lab, v in _increases(truth, "oximeter_gpu_ecc_errors_total")}
    assert [tuple(p) for p in health["n2"]["xid"]] == [("79", 1.0)] == [
        (x, v) for (n, x), v in sorted(xid.items()) if n == "n2" and v > 0]
    assert health["n2"]["ecc_corrected"] == ecc[("n2", "corrected")] > 0
    assert health["n1"]["xid"] == [] and health["n1"]["ecc_corrected"] == 0


def test_error_budgets_match_the_ground_truth(preview: Preview) -> None:
    # The default objectives: 99.9 % of answers not 5xx or 429; 99 % of requests admitted within 1 s.
    truth, numbers = preview.truth, preview.numbers
    served = [(labels, v) for labels, v in _increases(truth, "oximeter_requests_total")
              if labels.get("route") != "/v1/models"]
    total = sum(v for _, v in served)
    bad = sum(v for labels, v in served if labels["code"].startswith("5") or labels["code"] == "429")
    waits = _increases(truth, "oximeter_queue_wait_seconds_bucket")
    within = sum(v for labels, v in waits if float(labels["le"]) == 1.0)
    every = sum(v for labels, v in waits if labels["le"] in ("+Inf", "inf"))
    rows = {row["sli"]: row for row in numbers["budgets"]}
    assert sorted(rows) == ["availability", "queue_wait"]
    assert {r["service"] for r in rows.values()} == {"chat"}
    errors = rows["availability"]
    assert bad > 0  # the day's ingress errors on n2
    assert errors["requests"] == pytest.approx(total, rel=1e-12)
    assert errors["bad"] == pytest.approx(bad, rel=1e-12)
    assert errors["day_burn"] == pytest.approx(bad / total / 0.001, rel=1e-9)
    # The window is all Prometheus holds: this one day (its increase extrapolates at the edges).
    assert errors["budget_left"] == pytest.approx(1 - bad / total / 0.001, rel=0.05, abs=0.05)
    queue = rows["queue_wait"]
    assert queue["bad"] == pytest.approx(every - within, rel=1e-9, abs=1e-9)
    assert queue["day_burn"] == pytest.approx((every - within) / every / 0.01, rel=1e-9, abs=1e-9)
    assert "## Error budgets" in preview.markdown
    assert f"| requests | availability | chat | 99.9 % | {total:.0f} | {bad:.0f} |" in preview.markdown


def test_incidents_markdown_and_link(preview: Preview) -> None:
    numbers, markdown = preview.numbers, preview.markdown
    assert (numbers["incidents"], numbers["by_layer"], numbers["by_rule"]) == (
        1, [["infrastructure", 1]], [["thermal_throttle", 1]])
    assert numbers["mttd_s"] == 180.0 and numbers["mttr_s"] is None
    # Minutes anomalous from the analyzer's gauge, incidents and ratios from the stored incident.
    assert numbers["noisy_signals"] == [
        {"signal": "queue_wait_p99", "layer": "scheduling", "anomalous_minutes": 30.0, "peak_events": 2.0,
         "incidents": 1, "max_ratio": 2.4 / 0.12},
        {"signal": "gpu_temperature", "layer": "infrastructure", "anomalous_minutes": 10.0,
         "peak_events": 1.0, "incidents": 1, "max_ratio": 91.0 / 62.0}]
    assert "## Noisiest signals" in markdown
    assert numbers["learning"] == [["gpu_temperature", 3.0]]
    assert "gpu_temperature (3 series)" in markdown
    assert "| queue_wait_p99 | scheduling | 30 | 2 | 1 | 20 |" in markdown
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
        # No time limit of its own: the suite's per-test limit (pyproject.toml) bounds a hung run.
        done = subprocess.run(argv, cwd=day.root, env=env, capture_output=True, text=True, check=False)
        assert (done.returncode, done.stdout) == (0, "wecom: sent\n"), done.stderr[-2000:]
    kinds = [r.data["msgtype"] for r in receiver.accepted("wecom")]
    assert kinds[-1] == "image" and set(kinds[:-1]) <= {"markdown", "markdown_v2"} and len(kinds) >= 2
    image = receiver.accepted("wecom")[-1].data["image"]
    assert base64.b64decode(image["base64"]) == preview.png
    assert hashlib.md5(preview.png).hexdigest() == image["md5"]
    assert receiver.problems == []
    first = json.dumps(receiver.accepted("wecom")[0].data, ensure_ascii=False)
    assert "Daily health digest 2025-11-30" in first


def test_report_delivers_the_chart_to_every_channel(day: Day, receiver: ChatReceiver,
                                                    preview: Preview) -> None:
    conn = connect(day.root / "oximeter.db")
    app = build_app(IncidentStore(conn), None)
    chart_link.mount(app, conn)  # as the daemon mounts it on its API
    api = ThreadedApp(app).start()
    try:
        env = dict(os.environ)
        channels: dict[str, dict[str, str]] = {}
        for service in CHANNELS:
            channels[f"all-{service}"] = {"type": service, "url_env": f"CHAT_{service.upper()}_URL"}
            env[f"CHAT_{service.upper()}_URL"] = receiver.url(service)
            if receiver.secrets.get(service):
                channels[f"all-{service}"]["secret_env"] = f"CHAT_{service.upper()}_SECRET"
                env[f"CHAT_{service.upper()}_SECRET"] = str(receiver.secrets[service])
        (day.root / "chat.yaml").write_text(yaml.safe_dump({
            "incidents": {"store_path": "oximeter.db"},
            "reporter": {"store_path": "oximeter.db", "api_url": api.url, "channels": channels,
                         "digest": {"timezone": "UTC", "prometheus_url": day.url}}}))
        argv = oximeter_argv("--config", "chat.yaml", "report", "--date", DAY)
        done = subprocess.run(argv, cwd=day.root, env=env, capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stdout + done.stderr[-2000:]
        # (The store's earlier "wecom" row for the day is listed too.)
        assert {f"{name}: sent" for name in channels} <= set(done.stdout.splitlines())
        assert receiver.problems == []
        url = chart_link.chart_url(api.url, preview.png)
        for service in CHANNELS:
            # Every channel tells each SLO's budget, in its own format.
            said = json.dumps([r.data for r in receiver.accepted(service)], ensure_ascii=False)
            assert "Error budgets" in said and "budget left" in said, service
            charts = [delivered_chart(service, r.data) for r in receiver.accepted(service)]
            found = [c for c in charts if c is not None]
            assert found == ([preview.png] if service in ("wecom", "webhook") else [url]), service
        reply = requests.get(url, timeout=10)
        assert (reply.status_code, reply.headers["Content-Type"]) == (200, "image/png")
        assert reply.content == preview.png
    finally:
        api.stop()
        conn.close()
