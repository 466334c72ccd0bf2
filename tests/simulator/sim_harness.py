"""Helpers for simulator tests: a live ``oximeter sim serve`` child on ports it binds, a metrics reader."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import requests
from prometheus_client.parser import text_string_to_metric_families

from stack.ports import wait_ports
from stack.procs import ManagedProcess, http_ok, oximeter_argv

MODEL = "sim-test-model"
TOKEN = "test-admin-token"


@dataclass(frozen=True)
class Sim:
    """A running simulator: node i's engine is ``url(i)``."""

    ports: dict[str, int]  # node name -> engine port

    @property
    def nodes(self) -> int:
        """How many nodes (engines) it runs."""
        return len(self.ports)

    def url(self, node: int = 1) -> str:
        """Base URL of node ``n{node}``'s engine."""
        return f"http://127.0.0.1:{self.ports[f'n{node}']}"

    def admin(self, method: str, path: str, token: str | None = TOKEN, **kwargs: object) -> requests.Response:
        """Call the admin API with the bearer token (or none)."""
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return requests.request(method, self.url() + path, headers=headers, timeout=10, **kwargs)  # type: ignore[arg-type]

    def metrics(self, node: int = 1) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
        """Every sample of node's ``/metrics`` keyed by (name, labels)."""
        text = requests.get(self.url(node) + "/metrics", timeout=10).text
        return {
            (s.name, frozenset(s.labels.items())): s.value
            for fam in text_string_to_metric_families(text)
            for s in fam.samples
        }

    def value(self, name: str, node: int = 1, **labels: str) -> float:
        """One engine sample (model_name and engine labels filled in)."""
        full = {"model_name": MODEL, "engine": "0", **labels}
        return self.metrics(node)[(name, frozenset(full.items()))]


StartSim = Callable[..., Sim]
StartProcess = Callable[..., ManagedProcess]


def start_sim_process(
    start_process: Callable[..., ManagedProcess], port_file: Path, *extra: str, nodes: int = 2,
    token: str | None = TOKEN
) -> Sim:
    env = {"OXIMETER_ADMIN_TOKEN": token} if token else {"OXIMETER_ADMIN_TOKEN": ""}
    proc = start_process(
        "sim",
        oximeter_argv("sim", "serve", "--port", "0", "--port-file", str(port_file), "--nodes", str(nodes),
                      "--model", MODEL, *extra),
        env=env,
    )
    sim = Sim(wait_ports(proc, port_file))
    proc.wait_ready(
        lambda: all(http_ok(sim.url(i) + "/health") for i in range(1, nodes + 1)),
        timeout_s=30,
    )
    return sim

