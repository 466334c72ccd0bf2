"""``oximeter sim history``: 2 days × 2 nodes × 4 GPUs, backfilled with promtool, read back by PromQL."""

from __future__ import annotations

import json
import math
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest
import requests

from simulator.scenario import load_scenario, parse_duration_s
from stack.ports import start_reserved
from stack.procs import http_ok, oximeter_argv
from tests.simulator.sim_harness import StartProcess

STEP_S = 300
SCENARIO = """
name: backfill-test
nodes: 2
gpus_per_node: 4
base_rps: 0.3
engine: {tokens_per_iteration: 16}
faults:
  - {kind: ecc_storm, node: n2, gpu: 1, start: -2h, duration: 30m, strength: 60}
  - {kind: telemetry_loss, node: n1, start: -1h, duration: 20m}
truth: {layer: infrastructure, entity: {node: n2, gpu: "1"}, rule: ecc_storm}
"""



@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        (90, 90.0),
        ("90s", 90.0),
        ("15m", 900.0),
        ("2h", 7200.0),
        ("1d6h", 108000.0),
        ("-2h", -7200.0),
        ("1.5h", 5400.0),
    ],
)
def test_durations(text: object, seconds: float) -> None:
    assert parse_duration_s(text) == seconds


def test_every_shipped_scenario_loads() -> None:
    files = sorted((Path(__file__).parents[2] / "simulator" / "scenarios").glob("*.yaml"))
    assert files
    for path in files:
        scenario = load_scenario(path)
        assert scenario.name == path.stem


def test_two_days_backfill_and_promql(tmp_path: Path, start_process: StartProcess) -> None:
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(SCENARIO, encoding="utf-8")
    end = math.floor(time.time() / STEP_S) * STEP_S
    out = tmp_path / "out"
    run = subprocess.run(
        [
            *oximeter_argv(
                "--log-level",
                "WARNING",
                "sim",
                "history",
                "--scenario",
                str(scenario),
                "--days",
                "2",
                "--step",
                "5m",
                "--out",
                str(out),
                "--end",
                str(end),
            )
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    tsdb = tmp_path / "tsdb"
    backfill = subprocess.run(
        [
            "promtool",
            "tsdb",
            "create-blocks-from",
            "openmetrics",
            "--max-block-duration=72h",
            str(out / "history.om"),
            str(tsdb),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert backfill.returncode == 0, backfill.stderr[-2000:]

    config = tmp_path / "prometheus.yml"
    config.write_text("global: {scrape_interval: 1m}\nscrape_configs: []\n", encoding="utf-8")
    _, port = start_reserved(lambda port: start_process("prometheus", [
        "prometheus",
        f"--config.file={config}",
        f"--storage.tsdb.path={tsdb}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--storage.tsdb.retention.time=30d",
    ]), lambda port: http_ok(f"http://127.0.0.1:{port}/-/ready"))
    base = f"http://127.0.0.1:{port}"

    def query(expr: str, at: float = end) -> dict[tuple[tuple[str, str], ...], float]:
        resp = requests.get(
            f"{base}/api/v1/query", params={"query": expr, "time": str(at)}, timeout=30
        ).json()
        assert resp["status"] == "success", resp
        return {tuple(sorted(r["metric"].items())): float(r["value"][1]) for r in resp["data"]["result"]}

    # Every GPU of both nodes, with the exporter's labels, one sample per step for two days.
    gpus = query(
        "count by (node) (count by (node, gpu, uuid, gpu_model, pci_bus_id) "
        "(oximeter_gpu_temperature_celsius))"
    )
    assert gpus == {(("node", "n1"),): 4, (("node", "n2"),): 4}
    assert list(query('count_over_time(oximeter_gpu_up{node="n2",gpu="0"}[2d])').values()) == [
        2 * 86400 / STEP_S
    ]
    # n1's GPU series vanish during its telemetry loss (20 min = 4 steps), and come back.
    assert list(query('count_over_time(oximeter_gpu_up{node="n1",gpu="0"}[2d])').values()) == [
        2 * 86400 / STEP_S - 4
    ]
    assert {dict(k)["node"] for k in query("oximeter_gpu_up", at=end - 50 * 60)} == {"n2"}
    # 30 minutes of 60 corrected ECC errors per minute on n2 GPU 1 only.
    ecc = query('oximeter_gpu_ecc_errors_total{kind="corrected"}')
    by_gpu = {(dict(k)["node"], dict(k)["gpu"]): v for k, v in ecc.items()}
    assert by_gpu[("n2", "1")] == 1800 and sum(by_gpu.values()) == 1800
    # Engine (vLLM names + node/job/instance) and gateway (its own metric code) series.
    running = query("vllm:num_requests_running")
    assert {dict(k)["node"] for k in running} == {"n1", "n2"}
    assert {dict(k)["job"] for k in running} == {"vllm"}
    assert query('oximeter_queue_limit{node="n1"}') == {
        (
            ("__name__", "oximeter_queue_limit"),
            ("instance", "n1:9000"),
            ("job", "oximeter-gateway"),
            ("model", "sim-llama-3-8b"),
            ("node", "n1"),
            ("service", "chat"),
        ): 64
    }
    ok = query('sum by (node) (increase(oximeter_requests_total{code="200"}[2d]))')
    assert all(v > 1000 for v in ok.values()) and len(ok) == 2

    # The Parquet frames hold the very same numbers.
    series = pd.read_parquet(out / "series.parquet")
    samples = pd.read_parquet(out / "samples.parquet")
    sid = series[(series.name == "vllm:generation_tokens_total") & (series.node == "n1")].series_id.item()
    last = samples[samples.series_id == sid].sort_values("timestamp").value.iloc[-1]
    assert list(query('vllm:generation_tokens_total{node="n1"}').values()) == [last]
    truth = json.loads((out / "truth.json").read_text())
    assert truth["truth"] == {
        "layer": "infrastructure",
        "entity": {"node": "n2", "gpu": "1"},
        "rule": "ecc_storm",
    }
    faults = pd.read_parquet(out / "faults.parquet")
    assert faults.kind.tolist() == ["ecc_storm", "telemetry_loss"]
    assert faults.start.iloc[0] == pd.Timestamp(end - 7200, unit="s", tz="UTC")
