#!/usr/bin/env bash
# On a machine with an NVIDIA GPU and no network: start the exporter with the NVML backend,
# scrape it twice, check every expected family and print the scrape cost.
# Read-only: the exporter only queries NVML; this script never changes a GPU setting.
# Families that NVML reports NOT_SUPPORTED (MIG, consumer boards, older GPUs) may be absent:
# they are listed, not failed. Exit 0 = pass, 1 = a check failed.
set -euo pipefail

cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-.venv/bin/python}"
if [ ! -x "$PYTHON" ]; then PYTHON="$(command -v python3)"; fi

WORK="$(mktemp -d)"
# Port 0: the exporter binds a port the kernel picks and writes it to the port file.
"$PYTHON" -m exporter --backend nvml --node gpu-check --host 127.0.0.1 --port 0 \
    --port-file "$WORK/exporter.port" >"$WORK/exporter.log" 2>&1 &
EXPORTER_PID=$!
cleanup() {
    kill "$EXPORTER_PID" 2>/dev/null || true
    wait "$EXPORTER_PID" 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT

if command -v nvidia-smi >/dev/null 2>&1; then
    echo "== nvidia-smi -L"
    nvidia-smi -L || true
fi

echo "== exporter (log: $WORK/exporter.log while running)"
"$PYTHON" - "$WORK" "$EXPORTER_PID" <<'PY'
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

work, pid = sys.argv[1], int(sys.argv[2])
url = ""


def alive() -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def scrape() -> tuple[str, float]:
    started = time.perf_counter()
    with urllib.request.urlopen(url, timeout=30) as answer:
        body = answer.read().decode()
        assert answer.status == 200, answer.status
    return body, time.perf_counter() - started


deadline = time.monotonic() + 60
while True:
    if not alive():
        print("FAIL: the exporter exited:\n" + open(f"{work}/exporter.log").read())
        sys.exit(1)
    try:
        with open(f"{work}/exporter.port") as port_file:  # written once the exporter listens
            url = f"http://127.0.0.1:{json.load(port_file)}/metrics"
        scrape()
        break
    except OSError:
        if time.monotonic() > deadline:
            print("FAIL: no /metrics within 60 s:\n" + open(f"{work}/exporter.log").read())
            sys.exit(1)
        time.sleep(0.2)

(first, first_s), (text, second_s) = scrape(), scrape()
samples: dict[str, list] = {}
for family in text_string_to_metric_families(text):
    for sample in family.samples:
        samples.setdefault(sample.name, []).append(sample)

failures: list[str] = []
ups = samples.get("oximeter_gpu_up", [])
gpus = sorted(s.labels["gpu"] for s in ups)
print(f"GPUs: {len(ups)} " + ", ".join(f"{s.labels['gpu']}={s.labels['gpu_model']}" for s in ups))
if not ups:
    failures.append("no oximeter_gpu_up series")
for s in ups:
    if s.value != 1:
        failures.append(f"GPU {s.labels['gpu']} is down (oximeter_gpu_up 0)")

REQUIRED = ["oximeter_gpu_memory_used_bytes", "oximeter_gpu_memory_total_bytes",
            "oximeter_gpu_temperature_celsius", "oximeter_gpu_power_watts", "oximeter_gpu_sm_clock_hertz",
            "oximeter_gpu_sm_clock_max_hertz"]
OPTIONAL = ["oximeter_gpu_utilization_ratio", "oximeter_gpu_power_limit_watts",
            "oximeter_gpu_clock_event_active", "oximeter_gpu_ecc_errors_total", "oximeter_gpu_remapped_rows",
            "oximeter_gpu_row_remap_pending", "oximeter_gpu_row_remap_failure", "oximeter_gpu_pcie_replay_total",
            "oximeter_gpu_xid_errors_total", "oximeter_gpu_xid_last_timestamp_seconds",
            "oximeter_gpu_process_memory_used_bytes"]
for name in REQUIRED + OPTIONAL:
    have = sorted({s.labels["gpu"] for s in samples.get(name, [])})
    state = "ok" if have == gpus else ("absent on GPUs " + ",".join(sorted(set(gpus) - set(have))))
    if name in REQUIRED and have != gpus:
        failures.append(f"{name}: {state}")
        state = "FAIL " + state
    elif have != gpus:
        state += " (NOT_SUPPORTED here, or no process running: not a failure)"
    print(f"  {name:48s} {state}")
for name in ("oximeter_exporter_collect_duration_seconds", "oximeter_exporter_collect_errors_total"):
    if name not in samples:
        failures.append(f"{name} missing")
errors = {s.labels["reason"]: s.value for s in samples.get("oximeter_exporter_collect_errors_total", [])}
print("collect errors: " + (", ".join(f"{k}={v:g}" for k, v in sorted(errors.items()) if v) or "none"))
for reason in ("gpu_lost", "nvml_unknown", "timeout", "backend"):
    if errors.get(reason):
        failures.append(f"collect errors {reason}={errors[reason]:g}")

promtool = shutil.which("promtool")
if promtool:
    lint = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True)
    print("promtool check metrics: " + ("ok" if lint.returncode == 0 else "FAIL"))
    if lint.returncode != 0:
        failures.append("promtool: " + (lint.stdout + lint.stderr).strip())

collect_s = samples["oximeter_exporter_collect_duration_seconds"][0].value
print(f"scrape 1: {first_s * 1000:.1f} ms, scrape 2: {second_s * 1000:.1f} ms "
      f"(backend + host reads inside it: {collect_s * 1000:.1f} ms), {len(text)} bytes")
if failures:
    print("FAIL:\n  " + "\n  ".join(failures))
    sys.exit(1)
print("PASS")
PY
