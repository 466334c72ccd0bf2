"""``oximeter traffic`` (simulator/traffic.py): daily shape, request mix, loopback only, bounded runs."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from gateway_harness import MODEL, Upstream

from simulator.load_shape import RequestMix, daily_rate
from simulator.traffic import RequestBuilder, check_loopback, scaled_mix
from stack.procs import oximeter_argv


def test_daily_rate_has_base_as_mean_and_a_night_trough() -> None:
    day_s = 1440.0
    rates = [daily_rate(t, day_s, 10.0) for t in range(1440)]
    assert sum(rates) / len(rates) == pytest.approx(10.0)
    # Simulated 04:00 is far below the 20:30 evening peak.
    assert daily_rate(240.0, day_s, 10.0) < 0.3 * daily_rate(1230.0, day_s, 10.0)
    # start_hour shifts the day: starting at 20:30 means the peak comes first.
    assert daily_rate(0.0, day_s, 10.0, start_hour=20.5) == pytest.approx(daily_rate(1230.0, day_s, 10.0))
    # Without the shape it is the mean at every hour (the suite's live stack, flat scenarios).
    assert {daily_rate(t, day_s, 10.0, shaped=False) for t in range(0, 1440, 60)} == {10.0}


def test_builder_is_reproducible_and_mixes_streams_and_shared_prefixes() -> None:
    mix = RequestMix(model="m", stream_ratio=0.5, shared_prefixes=2, shared_prefix_ratio=1.0)
    first, again = RequestBuilder(mix, seed=7), RequestBuilder(mix, seed=7)
    assert [first.build() for _ in range(5)] == [again.build() for _ in range(5)]
    builder = RequestBuilder(mix, seed=3)
    bodies = [json.loads(builder.build().body) for _ in range(200)]
    streams = sum(b["stream"] for b in bodies)
    assert 60 < streams < 140
    assert len({b["messages"][0]["content"] for b in bodies}) == 2  # every request shares one of 2 prefixes
    assert all(1 <= b["max_tokens"] <= mix.max_output_tokens for b in bodies)
    pinned = json.loads(RequestBuilder(mix).build(stream=False, output_tokens=5, prompt_tokens=3).body)
    assert (pinned["stream"], pinned["max_tokens"], len(pinned["messages"][-1]["content"].split())) == (
        False,
        5,
        3,
    )


def test_a_prompt_scale_shortens_prompts_and_shared_prefixes_alike() -> None:
    mix = RequestMix(model="m", prompt_tokens_median=200, shared_prefix_tokens=256, shared_prefix_ratio=1.0)
    short = scaled_mix(mix, 0.1)
    assert (short.prompt_tokens_median, short.shared_prefix_tokens, scaled_mix(mix, 1.0)) == (20, 26, mix)
    body = json.loads(RequestBuilder(short, seed=1).build(prompt_tokens=None).body)
    assert len(body["messages"][0]["content"].split()) == 26


@pytest.mark.parametrize(
    ("url", "ok"),
    [
        ("http://127.0.0.1:8000/", True),
        ("http://localhost:1", True),
        ("http://[::1]:80", True),
        ("http://10.0.0.1:8000", False),
        ("https://api.openai.com", False),
        ("ftp://127.0.0.1", False),
    ],
)
def test_only_loopback_targets(url: str, ok: bool) -> None:
    if ok:
        assert check_loopback(url) == url.rstrip("/")
    else:
        with pytest.raises(ValueError):
            check_loopback(url)


def test_run_is_bounded_by_count_and_reports_answers(upstream: Upstream) -> None:
    out = subprocess.run(
        oximeter_argv(
            "traffic",
            "--target",
            upstream.url,
            "--base-rps",
            "40",
            "--day-seconds",
            "10",
            "--duration",
            "60",
            "--max-requests",
            "15",
            "--seed",
            "1",
        ),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    assert json.loads(out.splitlines()[-1]) == {"answers": {"200": 15}}
    bodies = upstream.completions()
    assert len(bodies) == 15
    assert {b["model"] for b in bodies} == {MODEL}
    assert 0 < sum(b["stream"] for b in bodies) < 15


def test_refuses_remote_target() -> None:
    result = subprocess.run(
        oximeter_argv("traffic", "--target", "http://192.0.2.1:8000"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "not an http(s) URL on 127.0.0.1" in result.stderr


def test_replays_a_trace_with_its_token_counts(upstream: Upstream, tmp_path: Path) -> None:
    # Twelve requests, each with its own output length and a prompt length paired with it.
    rows = [f"2023-11-16 18:17:{i:02d}.5,{10 + i},{3 + i}" for i in range(12)]
    trace = tmp_path / "trace.csv"
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + "\n".join(rows) + "\n", encoding="utf-8")
    out = subprocess.run(
        oximeter_argv("traffic", "--target", upstream.url, "--trace", str(trace), "--start-hour", "20.5",
                      "--duration", "60", "--max-requests", "12", "--stream-ratio", "0"),
        capture_output=True, text=True, timeout=120, check=True,
    ).stdout
    answers = json.loads(out.splitlines()[-1])["answers"]
    bodies = upstream.completions()
    assert answers == {"200": len(bodies)} and len(bodies) >= 6
    for body in bodies:
        words = len(body["messages"][-1]["content"].split())
        assert 3 <= body["max_tokens"] <= 14 and words == body["max_tokens"] + 7


def test_a_malformed_trace_is_refused_before_any_request(upstream: Upstream, tmp_path: Path) -> None:
    trace = tmp_path / "trace.csv"
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n1700000000,5,5\n1700000001,5\n",
                     encoding="utf-8")
    result = subprocess.run(oximeter_argv("traffic", "--target", upstream.url, "--trace", str(trace)),
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and f"{trace}: line 3: 2 fields" in result.stderr
    assert "Traceback" not in result.stderr and upstream.completions() == []
