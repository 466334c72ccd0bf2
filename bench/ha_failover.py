"""Two analyzers on one PostgreSQL under live faults, the leader SIGKILLed at random moments.

The local stack (simulator, exporters, gateways, Prometheus with the time-scaled rules, the live
tests' cached backfill) runs as the end-to-end tests start it. PostgreSQL is started from
Debian's package on a Unix socket (``tests/pg_server.py``). Two ``oximeter analyze`` processes
share it with ``analyzer.ha`` on and tell a generic webhook receiver that checks each request's
signature and records its idempotency key (``tests/reporter/chat_receiver.py``).

Each round injects a thermal throttle on the next GPU (round robin over the fleet), waits a random
moment, SIGKILLs whichever analyzer holds the lease, measures the failover (kill → the other's
lease row) and restarts the killed one, which stands by. After the last round the faults end,
and the bench waits (bounded) for every incident to resolve and the outbox to drain, then counts:

- lost_incidents: faults no incident in the store took in: none held a member on the fault's
  GPU whose anomaly began while the fault ran (polled every 2 s; a fault on a node whose incident
  is still open joins that incident, which is right, so this counts members, not incidents);
- duplicate_messages: idempotency keys the receiver accepted more than once, plus incidents
  opened twice for one fault (two incidents with one root cause overlapping in time);
- missed_messages: change records never queued, and queued messages never accepted.

    .venv/bin/python bench/ha_failover.py [--kills 10] [--seed 0] [--lease-s 10] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "reporter"))

from chat_receiver import SECRETS, ChatReceiver  # noqa: E402
from pg_server import PostgresServer  # noqa: E402
from shared_stack import ANALYZER_STEP_S, BACKFILL, SCALE, live_options  # noqa: E402

from oximeter.store import connect  # noqa: E402
from stack.demo_stack import analyzer_config  # noqa: E402
from stack.local import Stack  # noqa: E402
from stack.ports import wait_port  # noqa: E402
from stack.procs import ManagedProcess, oximeter_argv, wait_until  # noqa: E402

FAULT_S = 25.0  # a thermal throttle this long opens within seconds at this time scale
# A round's length: rounds go round the fleet's GPUs, so a GPU's next fault comes long after its
# last one cleared, and each fault shows as a member anomaly of its own.
ROUND_S = 45.0
HOOK_URL_ENV, HOOK_SECRET_ENV = "OXIMETER_HA_HOOK_URL", "OXIMETER_HA_HOOK_SECRET"


@dataclass(frozen=True)
class Fault:
    """One injected fault: where and when (wall-clock seconds)."""

    node: str
    gpu: int
    start: float
    end: float


class Pair:
    """The two analyzers, restartable by slot."""

    def __init__(self, work: Path, config: Path, env: dict[str, str]) -> None:
        self.work, self.config, self.env = work, config, env
        self.procs: dict[str, ManagedProcess] = {}
        self.starts = 0

    def start(self, slot: str) -> ManagedProcess:
        self.starts += 1
        port_file = self.work / f"{slot}-{self.starts}.port"
        proc = ManagedProcess(f"analyzer-{slot}-{self.starts}", oximeter_argv(
            "--config", str(self.config), "analyze", "--port", "0", "--port-file", str(port_file)),
            self.work / "logs", env=self.env).start()
        # Listening is enough: a loaded machine can keep a cold first cycle busy for minutes, and
        # the lease row, not the API, says who leads.
        wait_port(proc, port_file, 300)
        self.procs[slot] = proc
        return proc

    def slot_of(self, pid: int) -> str | None:
        return next((s for s, p in self.procs.items() if p.proc is not None and p.proc.pid == pid), None)

    def stop(self) -> None:
        ManagedProcess.stop_all(list(self.procs.values()))


def _lease(url: str) -> tuple[str, float] | None:
    conn = connect(url)
    try:
        row = conn.execute("SELECT holder, acquired_at FROM leases WHERE shard = 'default'").fetchone()
    finally:
        conn.close()
    return None if row is None else (str(row[0]), float(row[1]))


def _taken_from(store: str, holder: str, timeout_s: float) -> float:
    """When another process took the lease ``holder`` held (its row's acquired_at)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        lease = _lease(store)
        if lease is not None and lease[0] != holder:
            return lease[1]
        time.sleep(0.2)
    raise TimeoutError(f"no analyzer took the lease from {holder} within {timeout_s:.0f} s")


def _pid(holder: str) -> int:
    return int(holder.split(":")[1])


def _config(work: Path, prometheus: str, store: str, lease_s: float) -> Path:
    doc = analyzer_config(work, prometheus, scale=SCALE, step_s=ANALYZER_STEP_S, interval_s=ANALYZER_STEP_S)
    doc["analyzer"]["ha"] = {"enabled": True, "lease_s": lease_s, "renew_s": lease_s / 3}
    doc["incidents"]["store_path"] = store
    doc["reporter"].update(store_path=store, storm_cap=10_000, deliver_interval_s=0.5, retry_base_s=0.5,
                           channels={"hook": {"type": "webhook", "url_env": HOOK_URL_ENV,
                                              "secret_env": HOOK_SECRET_ENV}})
    path = work / "oximeter.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return path


def _iso_s(text: str | None) -> float | None:
    return None if text is None else datetime.fromisoformat(text).timestamp()


def _seen(store: str, faults: list[Fault], found: set[int]) -> None:
    """Add to ``found`` each fault an incident in the store holds evidence of: a member on its GPU
    whose anomaly began while it ran (a re-run fault on a GPU replaces its member's onset)."""
    for (text,) in _rows(store, "SELECT data FROM incidents"):
        for member in json.loads(text)["evidence"]:
            labels, onset = member["labels"], _iso_s(member["onset"])
            where = (labels.get("node"), labels.get("gpu"))
            for n, f in enumerate(faults):
                if (n not in found and onset is not None and f.start - 5 <= onset <= f.end + 5
                        and where == (f.node, str(f.gpu))):
                    found.add(n)


def _watch(store: str, faults: list[Fault], found: set[int], until: float) -> None:
    """Poll the store for evidence of the faults until ``until`` (wall-clock seconds)."""
    while True:
        _seen(store, faults, found)
        if time.time() >= until:
            return
        time.sleep(min(2.0, max(0.0, until - time.time())))


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(0.95 * len(ordered) + 0.5) - 1))]


def _rows(url: str, sql: str) -> list[Any]:
    conn = connect(url)
    try:
        return list(conn.execute(sql).fetchall())
    finally:
        conn.close()


def run(kills: int, seed: int, lease_s: float, work: Path) -> int:
    rng = random.Random(seed)
    receiver = ChatReceiver().start()
    failovers: list[float] = []
    faults: list[Fault] = []
    found: set[int] = set()  # the faults an incident holds evidence of (by position)
    with PostgresServer() as server, Stack(work / "stack", live_options(
            backfill_dir=work / "backfill", alertmanager=False)) as stack:
        assert stack.endpoints is not None
        store = server.url(server.new_schema("ha"))
        config = _config(work, stack.endpoints.prometheus, store, lease_s)
        env = {HOOK_URL_ENV: receiver.url("webhook"), HOOK_SECRET_ENV: str(SECRETS["webhook"])}
        pair = Pair(work, config, env)
        try:
            pair.start("a")
            wait_until(lambda: _lease(store) is not None, 300, what="a leader")
            pair.start("b")
            gpus = [(node, gpu) for gpu in range(BACKFILL.gpus_per_node) for node in stack.nodes]
            for round_no in range(kills):
                node, gpu = gpus[round_no % len(gpus)]
                start = time.time()
                stack.fault("thermal_throttle", node, gpu=gpu, strength=0.45, duration_s=FAULT_S)
                faults.append(Fault(node, gpu, start, start + FAULT_S))
                time.sleep(rng.uniform(1.0, ROUND_S / 2))  # the random moment of the kill
                lease = _lease(store)
                assert lease is not None
                slot = pair.slot_of(_pid(lease[0]))
                assert slot is not None, f"the lease holder {lease[0]} is none of the pair"
                killed_at = time.time()
                pair.procs[slot].signal(signal.SIGKILL)
                taken = _taken_from(store, lease[0], lease_s * 6)
                failovers.append(taken - killed_at)
                print(f"round {round_no + 1}: killed {slot} on {node}/{gpu}'s fault, "
                      f"failover {failovers[-1]:.1f} s", flush=True)
                pair.procs[slot].stop()
                pair.start(slot)
                _watch(store, faults, found, start + ROUND_S)
            # Every fault over and resolved, every message out (bounded: the resolve windows).
            _watch(store, faults, found, faults[-1].end + 60)
            wait_until(lambda: not _rows(store, "SELECT id FROM incidents WHERE state = 'open'")
                       and not _rows(store, "SELECT id FROM outbox WHERE state IN ('pending', 'delivering')"),
                       300, interval_s=1.0, what="every incident resolved and the outbox drained")
        finally:
            pair.stop()
        incidents = _rows(store, "SELECT id, root_entity, nodes, opened_at, resolved_at FROM incidents")
        changes = {r[0] for r in _rows(store, "SELECT key FROM incident_changes")}
        queued = {r[0] for r in _rows(store, "SELECT idempotency_key FROM outbox WHERE kind = 'message'")}
    accepted = receiver.accepted_keys()
    receiver.stop()
    lost = len(faults) - len(found)
    if lost:
        print("faults without an incident: " + ", ".join(
            f"{f.node}/{f.gpu} at {time.strftime('%H:%M:%S', time.gmtime(f.start))}"
            for n, f in enumerate(faults) if n not in found))
    twice = sum(1 for i, a in enumerate(incidents) for b in incidents[i + 1:]
                if a[1] == b[1] and a[3] <= (b[4] or float("inf")) and b[3] <= (a[4] or float("inf")))
    duplicates = sum(n - 1 for n in accepted.values() if n > 1) + twice
    missed = len(changes - queued) + len(queued - set(accepted))
    print(f"incidents={len(incidents)} messages={sum(accepted.values())} faults={len(faults)} "
          f"failovers_s={[round(f, 1) for f in failovers]}")
    print(f"ha: kills={len(failovers)} failover_p95_s={_p95(failovers):.1f} lost_incidents={lost} "
          f"duplicate_messages={duplicates} missed_messages={missed}")
    return 0 if not (lost or duplicates or missed) and _p95(failovers) <= 60 else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lease-s", type=float, default=10.0)
    parser.add_argument("--workdir", type=Path, default=None, help="default: a fresh temporary folder")
    args = parser.parse_args()
    if args.workdir is None:
        with tempfile.TemporaryDirectory(prefix="oximeter-ha-") as tmp:
            return run(args.kills, args.seed, args.lease_s, Path(tmp))
    args.workdir.mkdir(parents=True, exist_ok=True)
    return run(args.kills, args.seed, args.lease_s, args.workdir)


if __name__ == "__main__":
    sys.exit(main())
