"""The simulator backend against a JSON server speaking the fleet contract, and the real simulator."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from exporter_harness import (
    GIB,
    NODE,
    FleetServer,
    fleet_server,
    gpu_labels,
    scrape_once,
    sim_document,
    sim_gpu,
)

from exporter.backends.sim import SimBackend
from exporter.collector import GpuCollector
from simulator.clock import VirtualClock
from simulator.engine import EngineParams
from simulator.fleet import Fleet
from stack.ports import refusing_port


@pytest.fixture
def server() -> Iterator[FleetServer]:
    yield from fleet_server(sim_document([sim_gpu(0), sim_gpu(1)]))


def collector_for(url: str) -> GpuCollector:
    backend = SimBackend(url, NODE, timeout_s=5.0)
    backend.start()
    return GpuCollector(backend, NODE)


def errors(registry: object, reason: str) -> float | None:
    return registry.get_sample_value(  # type: ignore[attr-defined]
        "oximeter_exporter_collect_errors_total", {"node": NODE, "reason": reason})


def test_asks_for_its_node(server: FleetServer) -> None:
    scrape_once(collector_for(server.url))
    assert server.requests == ["/fleet/gpus?node=n1"]


def test_telemetry_lost_means_no_gpu_series(server: FleetServer) -> None:
    server.status = 503
    registry = scrape_once(collector_for(server.url))
    assert registry.get_sample_value("oximeter_gpu_up", gpu_labels(0)) is None
    assert errors(registry, "telemetry_lost") == 1
    assert registry.get_sample_value("oximeter_simulation_info", {"node": NODE}) == 1


def test_unreachable_simulator_is_an_error_not_a_crash() -> None:
    with refusing_port() as port:
        registry = scrape_once(collector_for(f"http://127.0.0.1:{port}"))
    assert errors(registry, "sim_unreachable") == 1
    assert registry.get_sample_value("oximeter_gpu_up", gpu_labels(0)) is None
    # Absence is exported, from the first scrape: the node-level gauge says the source is unread.
    assert registry.get_sample_value("oximeter_telemetry_up", {"node": NODE}) == 0


def test_telemetry_up_while_the_simulator_answers(server: FleetServer) -> None:
    collector = collector_for(server.url)
    assert scrape_once(collector).get_sample_value("oximeter_telemetry_up", {"node": NODE}) == 1
    server.status = 503
    assert scrape_once(collector).get_sample_value("oximeter_telemetry_up", {"node": NODE}) == 0


@pytest.mark.parametrize("raw", [b"<html>502 Bad Gateway</html>", b'{"gpus": [', b"\xff\xfe", b"[1, 2]",
                                 b'{"gpus": 7}', b'{"gpus": [{"index": 0, "xid_events": [{"xid": 79}]}]}',
                                 b'{"gpus": [{"index": 0, "processes": [{"used_memory_bytes": 1}]}]}'])
def test_garbage_is_a_bad_payload_not_unreachable(server: FleetServer, raw: bytes) -> None:
    server.raw = raw
    registry = scrape_once(collector_for(server.url))
    assert errors(registry, "sim_bad_payload") == 1
    assert not errors(registry, "sim_unreachable") and not errors(registry, "backend")
    assert registry.get_sample_value("oximeter_telemetry_up", {"node": NODE}) == 0


@pytest.mark.parametrize(
    ("gpu1", "expected", "reasons"),
    [
        # lost: up 0, readings absent (the simulator sends nulls), Xid kept, error counted
        (sim_gpu(1, lost=True, temperature_celsius=None, xid_events=[{"xid": 79, "timestamp_seconds": 1e9}]),
         {("oximeter_gpu_up", ()): 0, ("oximeter_gpu_temperature_celsius", ()): None,
          ("oximeter_gpu_xid_errors_total", (("xid", "79"),)): 1,
          ("oximeter_gpu_xid_last_timestamp_seconds", (("xid", "79"),)): 1e9},
         {"gpu_lost": 1}),
        # null = not available: absent, never 0
        (sim_gpu(1, temperature_celsius=None, clock_event_reasons=None, xid_events=None, processes=None),
         {("oximeter_gpu_up", ()): 1, ("oximeter_gpu_temperature_celsius", ()): None,
          ("oximeter_gpu_clock_event_active", (("reason", "idle"),)): None,
          ("oximeter_gpu_xid_errors_total", (("xid", "79"),)): None,
          ("oximeter_gpu_process_memory_used_bytes", (("pid", "4243"), ("process", "python3"))): None,
          ("oximeter_gpu_power_watts", ()): 512.345},
         {"gpu_lost": 0}),
        # repeated Xids are counted, the latest time kept; application Xids appear when seen
        (sim_gpu(1, xid_events=[{"xid": 13, "timestamp_seconds": 100.0},
                                {"xid": 13, "timestamp_seconds": 160.5},
                                {"xid": 48, "timestamp_seconds": 130.0}]),
         {("oximeter_gpu_xid_errors_total", (("xid", "13"),)): 2,
          ("oximeter_gpu_xid_last_timestamp_seconds", (("xid", "13"),)): 160.5,
          ("oximeter_gpu_xid_errors_total", (("xid", "48"),)): 1,
          ("oximeter_gpu_xid_errors_total", (("xid", "79"),)): 0},
         {}),
        # a malformed GPU object: that GPU is skipped and counted, the other still exported
        (sim_gpu(1, temperature_celsius="hot"),
         {("oximeter_gpu_up", ()): None},
         {"sim_bad_payload": 1}),
    ],
    ids=["lost", "nulls", "xid-repeats", "malformed"],
)
def test_gpu_states(server: FleetServer, gpu1: dict[str, object],
                    expected: dict[tuple[str, tuple[tuple[str, str], ...]], float | None],
                    reasons: dict[str, float]) -> None:
    server.document = sim_document([sim_gpu(0), gpu1])
    registry = scrape_once(collector_for(server.url))
    for (name, extra), want in expected.items():
        assert registry.get_sample_value(name, {**gpu_labels(1), **dict(extra)}) == want, (name, extra)
    for reason, count in reasons.items():
        assert errors(registry, reason) == count
    assert registry.get_sample_value("oximeter_gpu_up", gpu_labels(0)) == 1


def test_simulated_process_rss(server: FleetServer) -> None:
    server.document = sim_document([sim_gpu(0)], processes=[
        {"name": "vllm", "pid": 10, "rss_bytes": 3 * GIB}, {"name": "vllm", "pid": 11, "rss_bytes": GIB},
        {"name": "tokenizer", "pid": 12, "rss_bytes": None}])
    registry = scrape_once(collector_for(server.url))
    rss = "oximeter_process_resident_memory_bytes"
    assert registry.get_sample_value(rss, {"node": NODE, "process": "vllm"}) == 4 * GIB
    assert registry.get_sample_value(rss, {"node": NODE, "process": "tokenizer"}) is None


@pytest.mark.parametrize(("total", "want", "bad"), [(256 * GIB, 256 * GIB, 0.0), (None, None, 0.0),
                                                    ("lots", None, 1.0), (0, None, 1.0)])
def test_simulated_host_memory(server: FleetServer, total: object, want: float | None, bad: float) -> None:
    document = sim_document([sim_gpu(0)])
    if total is not None:
        document["host_memory_total_bytes"] = total
    server.document = document
    registry = scrape_once(collector_for(server.url))
    assert registry.get_sample_value("oximeter_host_memory_total_bytes", {"node": NODE}) == want
    assert errors(registry, "sim_bad_payload") == bad


def test_simulated_nvlinks(server: FleetServer) -> None:
    gpu = {**sim_gpu(0), "nvlinks": [
        {"link": 0, "up": True, "errors": {"crc_flit": 4, "replay": 1}, "transmit_bytes": 10,
         "receive_bytes": 20},
        {"link": 1, "up": False, "errors": {}, "transmit_bytes": None, "receive_bytes": None}]}
    server.document = sim_document([gpu])
    registry = scrape_once(collector_for(server.url))

    def got(name: str, **extra: str) -> float | None:
        return registry.get_sample_value(name, {**gpu_labels(0), **extra})

    assert (got("oximeter_gpu_nvlink_up", link="0"), got("oximeter_gpu_nvlink_up", link="1")) == (1, 0)
    assert got("oximeter_gpu_nvlink_errors_total", link="0", kind="crc_flit") == 4
    assert got("oximeter_gpu_nvlink_errors_total", link="0", kind="crc_data") is None
    assert got("oximeter_gpu_nvlink_transmit_bytes_total", link="0") == 10
    assert got("oximeter_gpu_nvlink_receive_bytes_total", link="0") == 20
    assert got("oximeter_gpu_nvlink_transmit_bytes_total", link="1") is None
    for bad in ("lots", [5], [{"link": 0, "up": True, "errors": "many"}]):
        server.document = sim_document([{**sim_gpu(0), "nvlinks": bad}])
        assert errors(scrape_once(collector_for(server.url)), "sim_bad_payload") == 1, bad


def test_a_degraded_nvlink_of_the_real_simulator(server: FleetServer) -> None:
    # The simulator's own fleet document, served as its HTTP API serves it: link 2 of GPU 1 fails.
    clock = VirtualClock()
    fleet = Fleet(clock, nodes=1, gpus_per_node=2, params=EngineParams(), model_name="m")
    fleet.add_fault({"kind": "nvlink_degraded", "node": NODE, "gpu": 1, "link": 2, "start": 0,
                     "strength": 300})
    for t in range(0, 61):
        clock.set(float(t))
        fleet.step_gpus(NODE, clock.now(), 1.0, 1000.0)
    server.document = fleet.gpus_json(NODE, 60.0, 1000.0)
    registry = scrape_once(collector_for(server.url))
    gpu = server.document["gpus"][1]
    labels = {"node": NODE, "gpu": "1", "uuid": gpu["uuid"], "gpu_model": gpu["name"],
              "pci_bus_id": gpu["pci_bus_id"]}

    def got(name: str, link: int, **extra: str) -> float | None:
        return registry.get_sample_value(name, {**labels, "link": str(link), **extra})

    counts = [got("oximeter_gpu_nvlink_errors_total", 2, kind=k) for k in ("crc_flit", "replay", "crc_data")]
    assert counts == [300, 300, 30]
    assert {got("oximeter_gpu_nvlink_errors_total", link, kind="crc_flit") for link in (0, 1, 3)} == {0}
    sent = [got("oximeter_gpu_nvlink_transmit_bytes_total", link) for link in range(4)]
    assert sent[2] == pytest.approx(sent[0] / 2, rel=1e-6) and sent[0] == sent[1] == sent[3] > 0
