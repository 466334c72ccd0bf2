"""``oximeter sim serve`` over HTTP: OpenAI shapes, vLLM metrics, aborts, faults, admin auth."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from typing import Any

import openai
import pytest
import requests

from stack.procs import wait_until
from tests.simulator.sim_harness import MODEL, TOKEN, Sim, StartSim

FAST = ("--decode-s-per-token", "0.01", "--decode-batch-factor", "0")


def client(sim: Sim, node: int = 1) -> openai.OpenAI:
    return openai.OpenAI(base_url=sim.url(node) + "/v1", api_key="unused", max_retries=0, timeout=30)


def test_openai_shapes_streaming_and_not(start_sim: StartSim) -> None:
    sim = start_sim(*FAST)
    c = client(sim, 2)
    assert [m.id for m in c.models.list().data] == [MODEL]
    chat = c.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hello"}], max_tokens=5
    )
    assert chat.object == "chat.completion" and chat.choices[0].finish_reason == "length"
    assert chat.choices[0].message.content == " lorem ipsum dolor sit amet"
    assert chat.usage is not None and (chat.usage.prompt_tokens, chat.usage.completion_tokens) == (6, 5)

    chunks = list(
        c.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=4, stream=True
        )
    )
    assert [ch.object for ch in chunks] == ["chat.completion.chunk"] * 6
    assert chunks[0].choices[0].delta.role == "assistant"
    assert (
        "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices) == " lorem ipsum dolor sit"
    )
    assert chunks[4].choices[0].finish_reason == "length"
    assert chunks[5].choices == [] and chunks[5].usage is not None and chunks[5].usage.completion_tokens == 4

    text = c.completions.create(model=MODEL, prompt="abcdefgh", max_tokens=2)
    assert (text.object, text.choices[0].text, text.usage.total_tokens if text.usage else None) == (
        "text_completion",
        " lorem ipsum",
        4,
    )
    streamed = list(c.completions.create(model=MODEL, prompt="abcd", max_tokens=3, stream=True))
    assert "".join(ch.choices[0].text for ch in streamed if ch.choices) == " lorem ipsum dolor"

    raw = requests.post(
        sim.url() + "/v1/completions",
        json={"model": MODEL, "prompt": "x", "max_tokens": 1, "stream": True},
        timeout=10,
    )
    assert raw.headers["Content-Type"].startswith("text/event-stream")
    assert raw.text.endswith("data: [DONE]\n\n")
    # Without max_tokens the simulated model stops by itself after --default-output-tokens.
    natural = c.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}])
    assert (
        natural.choices[0].finish_reason == "stop" and natural.usage and natural.usage.completion_tokens == 32
    )

    assert sim.value("vllm:request_success_total", 2, finished_reason="length") == 4
    assert sim.value("vllm:request_success_total", 2, finished_reason="stop") == 1
    assert sim.value("vllm:generation_tokens_total", 2) == 5 + 4 + 2 + 3 + 32
    assert sim.value("vllm:generation_tokens_total", 1) == 1


@pytest.mark.parametrize(
    ("body", "status", "reason"),
    [
        ("{not json", 400,
         "body: malformed JSON (Expecting property name enclosed in double quotes: "
         "line 1 column 2 (char 1))"),
        (json.dumps({"model": MODEL}), 400, "messages: expected a non-empty list"),
        (
            json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "x"}], "max_tokens": 0}),
            400,
            "max_tokens: expected an integer >= 1, got 0",
        ),
        (
            json.dumps({"model": "other", "messages": [{"role": "user", "content": "x"}]}),
            404,
            "The model `other` does not exist.",
        ),
    ],
)
def test_bad_requests_are_refused_with_a_reason(
    start_sim: StartSim, body: str, status: int, reason: str
) -> None:
    sim = start_sim(*FAST, nodes=1)
    resp = requests.post(sim.url() + "/v1/chat/completions", data=body, timeout=10)
    assert (resp.status_code, resp.json()["message"]) == (status, reason)


def test_metrics_names_and_simulation_marker(start_sim: StartSim) -> None:
    sim = start_sim(*FAST)
    for node in (1, 2):
        names = {name for name, _labels in sim.metrics(node)}
        assert {
            "vllm:num_requests_running",
            "vllm:num_requests_waiting",
            "vllm:kv_cache_usage_perc",
            "vllm:prefix_cache_queries_total",
            "vllm:prefix_cache_hits_total",
            "vllm:num_preemptions_total",
            "vllm:prompt_tokens_total",
            "vllm:generation_tokens_total",
            "vllm:request_success_total",
            "vllm:time_to_first_token_seconds_bucket",
            "vllm:inter_token_latency_seconds_bucket",
            "vllm:e2e_request_latency_seconds_bucket",
            "vllm:request_queue_time_seconds_bucket",
            "oximeter_sim_aborted_requests_total",
            "oximeter_dependency_duration_seconds_bucket",
            "oximeter_cache_requests_total",
        } <= names
        info = sim.metrics(node)[
            ("oximeter_simulation_info", frozenset({"node": f"n{node}", "model_name": MODEL}.items()))
        ]
        assert info == 1


def test_client_abort_frees_the_sequence(start_sim: StartSim) -> None:
    sim = start_sim("--decode-s-per-token", "0.02", nodes=1)
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "x"}],
        "max_tokens": 5000,
        "stream": True,
        "sim_hold_after_chunks": 2,
        "sim_hold_key": "abort-me",
    }
    resp = requests.post(sim.url() + "/v1/chat/completions", json=body, stream=True, timeout=30)
    lines = resp.iter_lines()
    got = [next(lines) for _ in range(3)]  # chunk 1, blank separator, chunk 2
    assert got[0].startswith(b"data: ") and got[2].startswith(b"data: ")
    assert sim.value("vllm:num_requests_running") == 1
    resp.close()
    wait_until(lambda: sim.value("vllm:num_requests_running") == 0, 30, what="sequence freed")
    assert sim.value("oximeter_sim_aborted_requests_total") == 1
    stopped_at = sim.value("vllm:generation_tokens_total")
    # One more, complete request: the counter then rises by exactly its tokens, nothing more.
    client(sim).chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "x"}], max_tokens=3
    )
    assert sim.value("vllm:generation_tokens_total") == stopped_at + 3
    assert sim.value("vllm:request_success_total", finished_reason="length") == 1


def test_hold_and_release_hook(start_sim: StartSim) -> None:
    sim = start_sim(*FAST, nodes=1)
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "x"}],
        "max_tokens": 3,
        "stream": True,
        "sim_hold_after_chunks": 1,
        "sim_hold_key": "k1",
    }
    resp = requests.post(sim.url() + "/v1/chat/completions", json=body, stream=True, timeout=30)
    lines = resp.iter_lines()
    first = json.loads(next(lines)[len(b"data: ") :])
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": " lorem"}
    # The sequence has long finished in the engine; the stream still waits for the release.
    wait_until(lambda: sim.value("vllm:request_success_total", finished_reason="length") == 1, 30)
    released = sim.admin("POST", "/admin/release/k1")
    assert released.json() == {"released": "k1", "was_waiting": True}
    rest = [line for line in lines if line]
    assert rest[-1] == b"data: [DONE]" and len(rest) == 5  # 2 tokens, finish, usage, [DONE]


def test_decode_slowdown_fault_slows_tokens(start_sim: StartSim) -> None:
    sim = start_sim("--decode-s-per-token", "0.02", "--decode-batch-factor", "0", nodes=1)
    c = client(sim)
    c.completions.create(model=MODEL, prompt="x", max_tokens=11)
    # Inter-token gaps are the model's iteration times (not wall-clock jitter): 20 ms when healthy.
    itl = "vllm:inter_token_latency_seconds_bucket"
    assert (sim.value(itl, le="0.01"), sim.value(itl, le="0.025")) == (0, 10)
    added = sim.admin(
        "POST",
        "/admin/faults",
        json={"kind": "decode_slowdown", "node": "n1", "strength": 2, "duration_s": 600, "id": "slow"},
    )
    assert added.status_code == 201 and added.json()["strength"] == 2.0
    c.completions.create(model=MODEL, prompt="x", max_tokens=11)
    assert (sim.value(itl, le="0.025"), sim.value(itl, le="0.05")) == (10, 20)
    assert sim.value("vllm:inter_token_latency_seconds_sum") == pytest.approx(10 * 0.02 + 10 * 0.04)
    listed = sim.admin("GET", "/admin/faults").json()["faults"]
    assert [(f["id"], f["active"]) for f in listed] == [("slow", True)]
    assert sim.admin("DELETE", "/admin/faults/slow").status_code == 200
    assert sim.admin("DELETE", "/admin/faults/slow").status_code == 404


def test_engine_stall_piles_requests_up(start_sim: StartSim) -> None:
    sim = start_sim(*FAST, nodes=1)
    sim.admin("POST", "/admin/faults", json={"kind": "engine_stall", "node": "n1", "id": "stall"})
    done: list[int] = []
    threads = [
        threading.Thread(
            target=lambda: done.append(
                requests.post(
                    sim.url() + "/v1/completions",
                    json={"model": MODEL, "prompt": "x", "max_tokens": 2},
                    timeout=60,
                ).status_code
            )
        )
        for _ in range(3)
    ]
    for t in threads:
        t.start()
    wait_until(lambda: sim.value("vllm:num_requests_waiting") == 3, 30, what="requests queued")
    assert sim.value("vllm:generation_tokens_total") == 0
    sim.admin("DELETE", "/admin/faults/stall")
    for t in threads:
        t.join(60)
    assert done == [200, 200, 200]
    assert sim.value("vllm:generation_tokens_total") == 6


def test_admin_auth_and_malformed_faults(start_sim: StartSim) -> None:
    sim = start_sim(*FAST, nodes=1)
    fault = {"kind": "kv_shrink", "node": "n1", "strength": 0.5}
    assert sim.admin("POST", "/admin/faults", token=None, json=fault).status_code == 401
    assert sim.admin("POST", "/admin/faults", token="wrong", json=fault).status_code == 401
    bad = sim.admin("POST", "/admin/faults", json={"kind": "kv_shrink", "node": "n1", "strength": 3})
    assert (bad.status_code, bad.json()["error"]) == (
        400,
        "strength: kv_shrink takes fraction of the KV block pool left (0-1], got 3.0",
    )
    bad_json = sim.admin("POST", "/admin/faults", data="{")
    assert (bad_json.status_code, bad_json.json()["error"]) == (
        400, "body: malformed JSON (Expecting property name enclosed in double quotes: line 1 column 2 "
        "(char 1))")
    assert TOKEN not in bad.text


def test_admin_refuses_without_configured_token(start_sim: StartSim) -> None:
    sim = start_sim(*FAST, nodes=1, token=None)
    resp = sim.admin("POST", "/admin/faults", json={"kind": "engine_stall", "node": "n1"})
    assert resp.status_code == 403 and "OXIMETER_ADMIN_TOKEN" in resp.json()["error"]
    assert sim.admin("POST", "/admin/release/x").status_code == 403


def test_fleet_gpus_contract_and_telemetry_loss(start_sim: StartSim) -> None:
    sim = start_sim(*FAST, "--gpus-per-node", "2")
    data = requests.get(sim.url() + "/fleet/gpus", params={"node": "n2"}, timeout=10).json()
    assert (data["simulation"], data["node"], len(data["gpus"])) == (True, "n2", 2)
    assert set(data["gpus"][0]) == {
        "index",
        "uuid",
        "name",
        "pci_bus_id",
        "lost",
        "utilization_ratio",
        "memory_used_bytes",
        "memory_total_bytes",
        "temperature_celsius",
        "power_watts",
        "power_limit_watts",
        "sm_clock_hertz",
        "sm_clock_max_hertz",
        "clock_event_reasons",
        "ecc_corrected_total",
        "ecc_uncorrected_total",
        "remapped_rows_correctable",
        "remapped_rows_uncorrectable",
        "row_remap_pending",
        "row_remap_failure",
        "pcie_replay_total",
        "pcie_transmit_bytes_per_second",
        "pcie_receive_bytes_per_second",
        "xid_events",
        "processes",
        "nvlinks",
    }
    assert [p["name"] for p in data["processes"]] == ["vllm"]
    assert data["host_memory_total_bytes"] > 0
    assert data["gpus"][0]["memory_used_bytes"] / data["gpus"][0]["memory_total_bytes"] == pytest.approx(
        0.9, abs=0.01
    )
    sim.admin("POST", "/admin/faults", json={"kind": "telemetry_loss", "node": "n2"})
    assert requests.get(sim.url() + "/fleet/gpus", params={"node": "n2"}, timeout=10).status_code == 503
    assert requests.get(sim.url() + "/fleet/gpus", params={"node": "n1"}, timeout=10).status_code == 200
    assert requests.get(sim.url() + "/fleet/gpus", params={"node": "n9"}, timeout=10).status_code == 404


def test_fault_cli_injects_and_lists(start_sim: StartSim) -> None:
    sim = start_sim(*FAST, nodes=1)
    env = {"OXIMETER_ADMIN_TOKEN": TOKEN, "PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "oximeter",
            "sim",
            "fault",
            "--url",
            sim.url(),
            "decode_slowdown",
            "--node",
            "n1",
            "--duration",
            "60",
            "--strength",
            "3",
            "--id",
            "cli1",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["id"] == "cli1"
    listed = sim.admin("GET", "/admin/faults").json()["faults"]
    assert [(f["kind"], f["duration_s"], f["strength"]) for f in listed] == [("decode_slowdown", 60.0, 3.0)]


def test_thermal_fault_couples_gpu_and_engine_live(start_sim: StartSim) -> None:
    sim = start_sim("--decode-s-per-token", "0.02", "--decode-batch-factor", "0", "--gpus-per-node", "2")
    added = sim.admin(
        "POST",
        "/admin/faults",
        json={"kind": "thermal_throttle", "node": "n1", "gpu": 1, "strength": 0.5, "duration_s": 600},
    )
    assert added.status_code == 201

    def gpus(node: str) -> list[dict[str, Any]]:
        doc: dict[str, Any] = requests.get(
            sim.url() + "/fleet/gpus", params={"node": node}, timeout=10
        ).json()
        return list(doc["gpus"])

    wait_until(lambda: gpus("n1")[1]["temperature_celsius"] > 85, 30, what="n1 GPU 1 hot")
    n1, n2 = gpus("n1"), gpus("n2")
    assert (n1[1]["sm_clock_hertz"], n1[1]["clock_event_reasons"]) == (990e6, ["hw_thermal", "sw_thermal"])
    assert all(g["temperature_celsius"] < 85 and "hw_thermal" not in g["clock_event_reasons"] for g in n2)
    for node in (1, 2):
        client(sim, node).completions.create(model=MODEL, prompt="x", max_tokens=11)
    itl = "vllm:inter_token_latency_seconds_bucket"
    # n1's whole engine runs at its throttled GPU's half clock: 40 ms per token; n2 keeps 20 ms.
    assert (sim.value(itl, 1, le="0.025"), sim.value(itl, 1, le="0.05")) == (0, 10)
    assert (sim.value(itl, 2, le="0.025"), sim.value(itl, 2, le="0.05")) == (10, 10)


def test_history_only_fault_kinds_are_refused_live(start_sim: StartSim) -> None:
    sim = start_sim(*FAST, nodes=1)
    resp = sim.admin("POST", "/admin/faults", json={"kind": "traffic_spike", "node": "n1"})
    assert (resp.status_code, resp.json()["error"]) == (
        400,
        "kind: traffic_spike is only simulated by `oximeter sim history` scenarios",
    )
