"""The one fault schema, and how faults reach engines and GPUs (virtual clock, no HTTP)."""

from __future__ import annotations

from typing import Any

import pytest

from simulator.clock import VirtualClock
from simulator.engine import EngineParams
from simulator.faults import FaultBook, FaultError, parse_fault
from simulator.fleet import Fleet

NODES = ["n1", "n2"]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([], "expected a JSON object, got list"),
        ({"kind": "nope", "node": "n1"}, "kind: unknown fault kind 'nope'"),
        ({"kind": "engine_stall"}, "node: required"),
        ({"kind": "engine_stall", "node": "n9"}, "node: unknown node 'n9' (known: n1, n2)"),
        ({"kind": "engine_stall", "node": "n1", "color": 1}, "unknown keys: color"),
        ({"kind": "kv_shrink", "node": "n1", "strength": 2}, "strength: kv_shrink takes fraction"),
        ({"kind": "decode_slowdown", "node": "n1", "strength": 0.5}, "strength: decode_slowdown takes"),
        ({"kind": "decode_slowdown", "node": "n1", "duration_s": 0}, "duration_s: must be > 0"),
        (
            {"kind": "decode_slowdown", "node": "n1", "duration_s": "1m"},
            "duration_s: expected a finite number",
        ),
        ({"kind": "xid", "node": "n1", "gpu": 4}, "gpu: node has GPUs 0..3, got 4"),
        ({"kind": "xid", "node": "n1", "gpu": True}, "gpu: expected a GPU index"),
        ({"kind": "xid", "node": "n1", "link": 0}, "link: xid hits no single NVLink (only nvlink_degraded"),
        ({"kind": "nvlink_degraded", "node": "n1", "link": -1}, "link: expected an NVLink index >= 0"),
        ({"kind": "nvlink_degraded", "node": "n1", "link": "2"}, "link: expected an NVLink index"),
        ({"kind": "nvlink_degraded", "node": "n1", "link": 4}, "link: each GPU has NVLinks 0..3, got 4"),
    ],
)
def test_malformed_faults_name_the_key(data: Any, message: str) -> None:
    with pytest.raises(FaultError) as err:
        parse_fault(data, now=0.0, nodes=NODES, gpus_per_node=4, links_per_gpu=4)
    assert str(err.value).startswith(message)


def test_defaults_and_activity_window() -> None:
    fault = parse_fault(
        {"kind": "thermal_throttle", "node": "n1", "duration_s": 60, "id": "t1"}, now=100.0, nodes=NODES
    )
    assert (fault.start, fault.end, fault.gpu, fault.strength, fault.id) == (100.0, 160.0, 0, 0.5, "t1")
    assert [fault.active(t) for t in (99.9, 100.0, 159.9, 160.0)] == [False, True, True, False]
    book = FaultBook()
    book.add(fault)
    with pytest.raises(FaultError, match="already exists"):
        book.add(fault)
    assert book.active(120.0, "n1", gpu=0) == [fault]
    assert book.active(120.0, "n1", gpu=1) == []
    assert book.active(120.0, "n2") == []
    assert book.remove("t1") == fault and book.all() == []


def test_strongest_picks_the_largest_effect() -> None:
    book = FaultBook()
    for i, strength in enumerate((2.0, 5.0, 3.0)):
        book.add(
            parse_fault(
                {"kind": "decode_slowdown", "node": "n1", "strength": strength, "id": f"d{i}"}, now=0.0
            )
        )
    for i, strength in enumerate((0.5, 0.1)):
        book.add(
            parse_fault({"kind": "kv_shrink", "node": "n1", "strength": strength, "id": f"k{i}"}, now=0.0)
        )
    assert book.strongest(1.0, "n1", "decode_slowdown").strength == 5.0  # type: ignore[union-attr]
    assert book.strongest(1.0, "n1", "kv_shrink").strength == 0.1  # type: ignore[union-attr]
    # Faults added or removed after a lookup count at the next one.
    assert book.strongest(1.0, "n2", "kv_shrink") is None
    book.add(parse_fault({"kind": "kv_shrink", "node": "n2", "strength": 0.3, "id": "k2"}, now=0.0))
    assert book.strongest(1.0, "n2", "kv_shrink").strength == 0.3  # type: ignore[union-attr]
    book.remove("k1")
    assert book.strongest(1.0, "n1", "kv_shrink").strength == 0.5  # type: ignore[union-attr]


def make_fleet() -> tuple[VirtualClock, Fleet]:
    clock = VirtualClock()
    params = EngineParams(decode_s_per_token=0.1, decode_batch_factor=0.0, prefill_s_per_token=0.0)
    return clock, Fleet(clock, nodes=2, gpus_per_node=4, params=params, model_name="m")


def drive(fleet: Fleet, clock: VirtualClock, seconds: float, step_s: float = 1.0) -> None:
    """Keep every engine busy (one request in flight) and step GPUs once a second."""
    last_busy = {n: node.engine.busy_s for n, node in fleet.nodes.items()}
    for _ in range(int(seconds / step_s)):
        t0 = clock.now()
        for node in fleet.nodes.values():
            while len(node.engine.waiting) + len(node.engine.running) < 1:
                node.engine.submit(4, 10, t0)
        t = t0
        while t < t0 + step_s:
            for node in fleet.nodes.values():
                node.engine.advance(t)
                if not node.engine.running and not node.engine.waiting:
                    node.engine.submit(4, 10, t)
                    node.engine.advance(t)
            t = min([t0 + step_s, *[w for node in fleet.nodes.values() if (w := node.engine.next_wake)]])
            if t <= clock.now():
                t = t0 + step_s
            clock.set(t)
        for name, node in fleet.nodes.items():
            util = (node.engine.busy_s - last_busy[name]) / step_s
            last_busy[name] = node.engine.busy_s
            for gpu in node.gpus:
                gpu.step(clock.now(), util, fleet.faults, 0.0)


def test_thermal_throttle_couples_gpu_and_engine_on_one_node_only() -> None:
    clock, fleet = make_fleet()
    drive(fleet, clock, 30)
    before = {n: node.engine.stats.generation_tokens for n, node in fleet.nodes.items()}
    fleet.add_fault({"kind": "thermal_throttle", "node": "n1", "gpu": 2, "strength": 0.5, "duration_s": 60})
    drive(fleet, clock, 30)
    tokens = {n: node.engine.stats.generation_tokens - before[n] for n, node in fleet.nodes.items()}
    # The whole tensor-parallel engine runs at its throttled GPU's half clock.
    assert tokens == {"n1": 150, "n2": 300}
    n1 = fleet.gpus_json("n1", clock.now(), 0.0)["gpus"]
    n2 = fleet.gpus_json("n2", clock.now(), 0.0)["gpus"]
    assert n1[2]["temperature_celsius"] > 85 and n1[2]["sm_clock_hertz"] == 990e6
    assert n1[2]["clock_event_reasons"] == ["hw_thermal", "sw_thermal"]
    assert n1[0]["clock_event_reasons"] == [] and n1[0]["sm_clock_hertz"] == 1980e6
    assert all(g["temperature_celsius"] < 85 and g["clock_event_reasons"] == [] for g in n2)


@pytest.mark.parametrize(
    ("kind", "extra", "check"),
    [
        ("ecc_storm", {"strength": 120}, lambda g: g["ecc_corrected_total"] == 120),
        ("pcie_replay_burst", {"strength": 60}, lambda g: g["pcie_replay_total"] == 60),
        (
            "ecc_uncorrectable",
            {},
            lambda g: (
                (g["ecc_uncorrected_total"], g["row_remap_pending"], [e["xid"] for e in g["xid_events"]])
                == (1, True, [48])
            ),
        ),
        ("xid", {"strength": 94}, lambda g: g["xid_events"] == [{"xid": 94, "timestamp_seconds": 1000.0}]),
        # Readings are gone, the Xid log is not: Xid 79 explains the loss (as the exporter promises).
        ("gpu_lost", {}, lambda g: g["lost"] is True and g["temperature_celsius"] is None
         and g["xid_events"] == [{"xid": 79, "timestamp_seconds": 1000.0}]),
    ],
)
def test_gpu_faults_show_in_the_fleet_api(kind: str, extra: dict[str, Any], check: Any) -> None:
    clock, fleet = make_fleet()
    fleet.add_fault({"kind": kind, "node": "n2", "gpu": 1, "start": 0, "duration_s": 60, **extra})
    for t in range(0, 61):
        clock.set(float(t))
        for gpu in fleet.nodes["n2"].gpus:
            gpu.step(clock.now(), 0.5, fleet.faults, 1000.0)
    assert check(fleet.gpus_json("n2", 59.0, 1000.0)["gpus"][1])


def test_rss_leak_grows_linearly_and_restart_resets_counters() -> None:
    clock, fleet = make_fleet()
    fleet.add_fault({"kind": "rss_leak", "node": "n1", "start": 60, "strength": 64})
    base = fleet.rss_bytes("n1", 0.0)
    assert fleet.rss_bytes("n1", 60.0) == base
    assert fleet.rss_bytes("n1", 180.0) - base == 128 << 20
    drive(fleet, clock, 5)
    assert fleet.nodes["n1"].engine.stats.generation_tokens > 0
    fleet.add_fault({"kind": "engine_restart", "node": "n1", "strength": 30})
    dropped = fleet.apply_restarts(clock.now())
    assert len(dropped) == 1
    assert fleet.nodes["n1"].engine.stats.generation_tokens == 0
    assert fleet.conditions("n1", clock.now() + 29).stalled
    assert not fleet.conditions("n1", clock.now() + 30).stalled


def test_gpu_memory_leak_fills_one_card_then_the_engine_fails() -> None:
    _, fleet = make_fleet()
    gpu = fleet.nodes["n1"].gpus[1]
    total = gpu.spec.memory_total_bytes
    before = fleet.gpus_json("n1", 0.0, 1000.0)["gpus"][1]["memory_used_bytes"]
    fleet.add_fault({"kind": "gpu_memory_leak", "node": "n1", "gpu": 1, "start": 60, "strength": 180})
    two_min = fleet.gpus_json("n1", 180.0, 1000.0)["gpus"]
    assert two_min[1]["memory_used_bytes"] - before == 360 << 20
    assert two_min[0]["memory_used_bytes"] == before  # one card only
    assert two_min[1]["processes"][0]["used_memory_bytes"] == two_min[1]["memory_used_bytes"] - (512 << 20)
    # Full when the leak has eaten the headroom the engine left: then the engine stalls.
    full_at = 60 + (total - before) / (180 << 20) * 60
    assert gpu.out_of_memory_at(180.0, fleet.faults) == pytest.approx(full_at)
    assert not fleet.conditions("n1", full_at - 1).stalled
    assert fleet.conditions("n1", full_at).stalled
    assert fleet.gpus_json("n1", full_at + 600, 1000.0)["gpus"][1]["memory_used_bytes"] == total
    # Deleting the fault is restarting the engine: the memory is back and the engine runs.
    [fault] = fleet.faults.all()
    fleet.faults.remove(fault.id)
    assert not fleet.conditions("n1", full_at + 601).stalled
    assert fleet.gpus_json("n1", full_at + 601, 1000.0)["gpus"][1]["memory_used_bytes"] == before


def test_nvlink_traffic_follows_the_load_and_links_are_healthy() -> None:
    clock, fleet = make_fleet()
    busy, idle = fleet.nodes["n1"].gpus[0], fleet.nodes["n1"].gpus[1]
    for t in range(0, 61):
        clock.set(float(t))
        busy.step(clock.now(), 0.5, fleet.faults, 1000.0)
        idle.step(clock.now(), 0.0, fleet.faults, 1000.0)
    gpus = fleet.gpus_json("n1", 60.0, 1000.0)["gpus"]
    links = gpus[0]["nvlinks"]
    assert [link["link"] for link in links] == list(range(busy.spec.nvlinks))
    # Half the load for a minute: half the full-load rate, 60 s of it, each way on every link.
    want = int(busy.spec.nvlink_bytes_per_s_at_full * 0.5 * 60)
    assert {(link["transmit_bytes"], link["receive_bytes"]) for link in links} == {(want, want)}
    assert all(link["up"] and set(link["errors"].values()) == {0} for link in links)
    assert {link["transmit_bytes"] for link in gpus[1]["nvlinks"]} == {0}
    # PCIe follows the load too: half the full-load rate each way now, nothing on the idle card.
    pcie = busy.spec.pcie_bytes_per_s_at_full * 0.5
    busy_pcie = (gpus[0]["pcie_transmit_bytes_per_second"], gpus[0]["pcie_receive_bytes_per_second"])
    assert busy_pcie == (pcie, pcie)
    assert gpus[1]["pcie_transmit_bytes_per_second"] == gpus[1]["pcie_receive_bytes_per_second"] == 0


def test_a_degraded_nvlink_counts_errors_carries_half_and_slows_the_engine() -> None:
    clock, fleet = make_fleet()
    gpu = fleet.nodes["n1"].gpus[1]
    assert parse_fault({"kind": "nvlink_degraded", "node": "n1"}, now=0.0).link == 0  # the default link
    fleet.add_fault({"kind": "nvlink_degraded", "node": "n1", "gpu": 1, "link": 2, "start": 0,
                     "duration_s": 60, "strength": 600})
    healthy = fleet.conditions("n2", 30.0).slowdown
    # The all-reduce's share of a step, stretched by the half bandwidth the bad link has left.
    assert fleet.conditions("n1", 30.0).slowdown == pytest.approx(healthy * 1.15)
    assert fleet.conditions("n1", 60.0).slowdown == pytest.approx(healthy)
    for t in range(0, 121):
        clock.set(float(t))
        fleet.step_gpus("n1", clock.now(), 0.5, 1000.0)
    links = fleet.gpus_json("n1", 120.0, 1000.0)["gpus"][1]["nvlinks"]
    # 600 bad flits a minute for a minute: as many replays, a tenth corrupt data, 1 % recoveries.
    assert links[2]["errors"] == {"crc_flit": 600, "crc_data": 60, "replay": 600, "recovery": 6}
    assert [link["errors"] for link in links if link["link"] != 2] == \
        [dict.fromkeys(("crc_flit", "crc_data", "replay", "recovery"), 0)] * 3
    # Two minutes at half load; the bad link carried half of it during its minute.
    full = gpu.spec.nvlink_bytes_per_s_at_full * 0.5 * 120
    assert {link["transmit_bytes"] for link in links if link["link"] != 2} == {int(full)}
    assert links[2]["transmit_bytes"] == links[2]["receive_bytes"] == int(full * 0.75)
    # The other GPUs of the node, and the node's other engine, see nothing.
    others = fleet.gpus_json("n1", 120.0, 1000.0)["gpus"][0]["nvlinks"]
    assert {sum(link["errors"].values()) for link in others} == {0}
