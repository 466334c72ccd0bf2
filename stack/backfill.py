"""Yesterday for a fresh Prometheus: simulated history turned into TSDB blocks with promtool.

One simulation model, several outputs: ``oximeter sim history`` writes the fleet's past as
OpenMetrics, ``promtool tsdb create-blocks-from openmetrics`` turns it into blocks, and
``promtool tsdb create-blocks-from rules`` evaluates the (real-duration) recording rules over it
through a throw-away Prometheus, so baselines such as ``offset 1d`` exist from the first minute.
Rules that read other rules' output (``..._offset1d``, the node average of the GPU p95) come out
empty in one pass; a live Prometheus computes them from the backfilled first-level series.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from oximeter.errors import OximeterError
from simulator.defaults import DEPENDENCY_LATENCY_S, FLEET_GATEWAY, MODEL, NODES, SERVICE, STACK_GPUS_PER_NODE
from stack.ports import start_reserved
from stack.procs import ManagedProcess, http_ok, oximeter_argv


class BackfillError(OximeterError):
    """A backfill step failed; the message names the step and carries its output tail."""


@dataclass(frozen=True)
class BackfillSpec:
    """The simulated past: a fault-free fleet (unless ``faults`` say otherwise) over ``days``."""

    nodes: int = NODES
    gpus_per_node: int = STACK_GPUS_PER_NODE
    seed: int = 0
    model: str = MODEL
    service: str = SERVICE
    base_rps: float = 1.0  # per node, as in scenario files
    days: float = 1.0
    step_s: float = 15.0
    dependency_latency_s: float = DEPENDENCY_LATENCY_S
    daily_shape: bool = True  # False: traffic at base_rps at every hour
    faults: tuple[dict[str, Any], ...] = ()

    def scenario(self) -> dict[str, Any]:
        """The scenario file ``oximeter sim history`` reads."""
        return {
            "name": "backfill", "description": "stack backfill", "nodes": self.nodes,
            "gpus_per_node": self.gpus_per_node, "model": self.model, "service": self.service,
            "seed": self.seed, "base_rps": self.base_rps, "daily_shape": self.daily_shape,
            "engine": {"dependency_latency_s": self.dependency_latency_s},
            "gateway": dict(FLEET_GATEWAY),
            "faults": [dict(f) for f in self.faults], "truth": {"layer": "none", "rule": "none"},
        }


@dataclass(frozen=True)
class BackfillResult:
    """Blocks (raw series and recording rules) ready to copy into a Prometheus data directory."""

    blocks_dir: Path
    start_s: float
    end_s: float
    timings_s: dict[str, float] = field(default_factory=dict)

    def block_dirs(self) -> list[Path]:
        """Every block (a folder with ``meta.json``)."""
        return sorted(p for p in self.blocks_dir.iterdir() if (p / "meta.json").is_file())

    def install(self, data_dir: Path) -> int:
        """Copy every block into ``data_dir`` (before Prometheus starts); returns how many."""
        data_dir.mkdir(parents=True, exist_ok=True)
        blocks = self.block_dirs()
        for block in blocks:
            shutil.copytree(block, data_dir / block.name)
        return len(blocks)


def _run(step: str, argv: Sequence[str], log_dir: Path, timeout_s: float) -> None:
    log = log_dir / f"backfill-{step}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as out:
        try:
            result = subprocess.run(list(argv), stdout=out, stderr=subprocess.STDOUT, timeout=timeout_s,
                                    check=False)
        except subprocess.TimeoutExpired:
            raise BackfillError(f"backfill {step}: no result within {timeout_s:.0f}s (log: {log})") from None
    if result.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-20:])
        raise BackfillError(f"backfill {step} exited with {result.returncode}:\n{tail}")


def build_backfill(spec: BackfillSpec, out_dir: Path, *, rule_files: Sequence[Path], promtool: str,
                   prometheus: str, end_s: float | None = None, timeout_s: float = 600.0) -> BackfillResult:
    """Generate the history, import it and backfill the recording rules into ``out_dir/blocks``.

    A finished backfill in ``out_dir`` with the same spec is reused (its end time stays what it was).
    """
    manifest = out_dir / "backfill.json"
    if manifest.is_file():
        done = json.loads(manifest.read_text(encoding="utf-8"))
        if done["spec"] == json.loads(json.dumps(asdict(spec))):
            return BackfillResult(out_dir / "blocks", done["start_s"], done["end_s"], done["timings_s"])
    if out_dir.exists():
        shutil.rmtree(out_dir)
    logs, blocks = out_dir / "logs", out_dir / "blocks"
    out_dir.mkdir(parents=True)
    scenario = out_dir / "scenario.yaml"
    scenario.write_text(yaml.safe_dump(spec.scenario(), sort_keys=False), encoding="utf-8")
    end = end_s if end_s is not None else math.floor(time.time() / spec.step_s) * spec.step_s
    start = end - round(spec.days * 86400 / spec.step_s) * spec.step_s
    timings: dict[str, float] = {}

    t0 = time.monotonic()
    _run("history", oximeter_argv("sim", "history", "--scenario", str(scenario), "--days", str(spec.days),
                                  "--step", f"{spec.step_s:g}s", "--out", str(out_dir / "history"),
                                  "--end", f"{end:.0f}"), logs, timeout_s)
    timings["history"] = time.monotonic() - t0

    t0 = time.monotonic()
    _run("openmetrics", [promtool, "tsdb", "create-blocks-from", "openmetrics",
                         str(out_dir / "history" / "history.om"), str(blocks)], logs, timeout_s)
    (out_dir / "history" / "history.om").unlink()  # hundreds of MB, and the blocks now hold it
    timings["openmetrics"] = time.monotonic() - t0

    t0 = time.monotonic()
    _backfill_rules(blocks, out_dir / "rules", start, end, spec.step_s, rule_files, promtool, prometheus,
                    logs, timeout_s)
    timings["rules"] = time.monotonic() - t0

    result = BackfillResult(blocks, start, end, timings)
    manifest.write_text(json.dumps({"spec": asdict(spec), "start_s": start, "end_s": end,
                                    "timings_s": timings}, indent=2), encoding="utf-8")
    return result


def _backfill_rules(blocks: Path, rules_out: Path, start: float, end: float, step_s: float,
                    rule_files: Sequence[Path], promtool: str, prometheus: str, logs: Path,
                    timeout_s: float) -> None:
    """Recording rules over the raw blocks, read through a throw-away Prometheus on a copy of them."""
    reader_dir = rules_out.parent / "reader"
    shutil.copytree(blocks, reader_dir)  # the reader's own WAL and compactions stay out of ``blocks``
    config = rules_out.parent / "reader.yml"
    config.write_text("global: {}\n", encoding="utf-8")

    def launch(port: int) -> ManagedProcess:
        return ManagedProcess("backfill-reader", [
            prometheus, f"--config.file={config}", f"--storage.tsdb.path={reader_dir}",
            f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=3650d",
        ], logs).start()

    reader, port = start_reserved(launch, lambda port: http_ok(f"http://127.0.0.1:{port}/-/ready"))
    try:
        _run("rules", [promtool, "tsdb", "create-blocks-from", "rules", f"--start={start:.0f}",
                       f"--end={end:.0f}", f"--url=http://127.0.0.1:{port}", f"--output-dir={rules_out}",
                       f"--eval-interval={step_s:g}s", "--quiet", *map(str, rule_files)], logs, timeout_s)
    finally:
        reader.stop()
    shutil.rmtree(reader_dir)
    for block in sorted(rules_out.iterdir()) if rules_out.exists() else []:
        if (block / "meta.json").is_file():
            shutil.move(str(block), blocks / block.name)
    shutil.rmtree(rules_out, ignore_errors=True)
