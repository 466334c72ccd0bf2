"""The catalogue against the real producers: a simulator (vLLM-compatible engine and dependency
step), a gateway in front of it and a simulated-GPU exporter are started and scraped once."""

from __future__ import annotations

from functools import partial
from typing import Any

import pytest
import requests

from alert_rules import load_catalogue
from oximeter.procs import ManagedProcess, free_port, http_ok, oximeter_argv

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
    sim_port, gateway_port, exporter_port = free_port(), free_port(), free_port()
    procs = [
        ManagedProcess("simulator", oximeter_argv("sim", "serve", "--port", str(sim_port), "--nodes", "1",
                                                  "--gpus-per-node", "2"), logs),
        ManagedProcess("gateway", oximeter_argv("gateway", "--upstream", f"http://127.0.0.1:{sim_port}",
                                                "--port", str(gateway_port), "--node", "n1",
                                                "--service", "chat"), logs),
        ManagedProcess("exporter", oximeter_argv("exporter", "--backend", "sim", "--sim-url",
                                                 f"http://127.0.0.1:{sim_port}", "--node", "n1",
                                                 "--port", str(exporter_port)), logs),
    ]
    urls = {"simulator": sim_port, "gateway": gateway_port, "exporter": exporter_port}
    try:
        found = {}
        for proc, (producer, port) in zip(procs, urls.items(), strict=True):
            proc.start()
            url = f"http://127.0.0.1:{port}/metrics"
            proc.wait_ready(partial(http_ok, url), timeout_s=60)
            found[producer] = exposed_types(requests.get(url, timeout=10).text)
        return found
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

