"""Helpers for simulator tests: a live ``oximeter sim serve`` child on free ports, a metrics reader."""

from __future__ import annotations

import socket
from collections.abc import Callable
from dataclasses import dataclass

import requests
from prometheus_client.parser import text_string_to_metric_families

from oximeter.procs import ManagedProcess, free_port, http_ok, oximeter_argv

MODEL = "sim-test-model"
TOKEN = "test-admin-token"


@dataclass(frozen=True)
class Sim:
    """A running simulator: node i's engine is ``url(i)``."""

    port: int
    nodes: int

    def url(self, node: int = 1) -> str:
        """Base URL of node ``n{node}``'s engine."""
        return f"http://127.0.0.1:{self.port + node - 1}"

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
    start_process: Callable[..., ManagedProcess], *extra: str, nodes: int = 2, token: str | None = TOKEN
) -> Sim:
    port = free_port()
    while not all(_port_free(port + i) for i in range(nodes)):
        port = free_port()
    env = {"OXIMETER_ADMIN_TOKEN": token} if token else {"OXIMETER_ADMIN_TOKEN": ""}
    proc = start_process(
        "sim",
        oximeter_argv("sim", "serve", "--port", str(port), "--nodes", str(nodes), "--model", MODEL, *extra),
        env=env,
    )
    sim = Sim(port, nodes)
    proc.wait_ready(
        lambda: all(http_ok(sim.url(i) + "/health") for i in range(1, nodes + 1)),
        timeout_s=30,
    )
    return sim


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True
