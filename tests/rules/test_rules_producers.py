"""The catalogue against the real producers: a simulator (vLLM-compatible engine and dependency
step), a gateway in front of it and a simulated-GPU exporter are started and scraped once."""

from __future__ import annotations

from functools import partial
from typing import Any

import pytest
import requests

from alert_rules import load_catalogue
from stack.ports import wait_port, wait_ports
from stack.procs import ManagedProcess, http_ok, oximeter_argv

PREFIXES = ("oximeter_", "vllm:")


def exposed_types(text: str) -> dict[str, str]:
    """{family name: type} from the `# TYPE` lines of a text exposition."""
    families = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            if name.startswith(PREFIXES) and not name.endswith("_created"):
                families[name] = kind
    return families


@pytest.fixture(scope="module")
def expositions(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, str]]:
    """{producer: {family: type}} scraped from live processes (stopped at the end of the module)."""
    logs = tmp_path_factory.mktemp("producers")
    procs: list[ManagedProcess] = []

    def start(name: str, *args: str) -> str:
        """Start one producer on a port it binds; its /metrics URL once it answers."""
        port_file = logs / f"{name}.port"
        procs.append(ManagedProcess(name, oximeter_argv(*args, "--port", "0", "--port-file", str(port_file)),
                                    logs).start())
        proc = procs[-1]
        bound = wait_ports(proc, port_file)["n1"] if name == "simulator" else wait_port(proc, port_file)
        url = f"http://127.0.0.1:{bound}/metrics"
        proc.wait_ready(partial(http_ok, url), timeout_s=60)
        return url

    try:
        sim_metrics = start("simulator", "sim", "serve", "--nodes", "1", "--gpus-per-node", "2")
        sim_url = sim_metrics.removesuffix("/metrics")
        urls = {"simulator": sim_metrics,
                "gateway": start("gateway", "gateway", "--upstream", sim_url, "--node", "n1",
                                 "--service", "chat"),
                "exporter": start("exporter", "exporter", "--backend", "sim", "--sim-url", sim_url,
                                  "--node", "n1")}
        return {producer: exposed_types(requests.get(url, timeout=10).text) for producer, url in urls.items()}
    finally:
        for proc in reversed(procs):
            proc.stop()


def _catalogue(*producers: str) -> dict[str, dict[str, Any]]:
    return {m["name"]: m for m in load_catalogue() if m["producer"] in producers and not m.get("deprecated")}


@pytest.mark.parametrize(("producer", "catalogued"), [
    ("gateway", ("gateway",)),
    ("exporter", ("exporter",)),
    ("simulator", ("simulator", "vllm")),  # the simulator's engines speak vLLM v1's names
])
def test_producer_exposes_every_catalogued_metric_with_its_type(
        expositions: dict[str, dict[str, str]], producer: str, catalogued: tuple[str, ...]) -> None:
    exposed = expositions[producer]
    expected = _catalogue(*catalogued)
    assert {name: exposed.get(name) for name in expected} == {n: m["type"] for n, m in expected.items()}


def test_everything_exposed_is_catalogued(expositions: dict[str, dict[str, str]]) -> None:
    names = {m["name"] for m in load_catalogue()}
    assert {(p, n) for p, families in expositions.items() for n in families if n not in names} == set()


def test_exposed_types_parses_type_lines() -> None:
    text = "# HELP a_total x\n# TYPE a_total counter\n# TYPE a_created gauge\n# TYPE oximeter_b gauge\n"
    assert exposed_types(text) == {"oximeter_b": "gauge"}

