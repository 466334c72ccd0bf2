"""SLOs in the configuration: defaults, and every problem named with the file and key by `config check`."""

from __future__ import annotations

from pathlib import Path

import pytest

from analyzer.signals.slo import HISTOGRAMS, SloSettings
from gateway.metrics import LATENCY_BUCKETS_S, QUEUE_WAIT_BUCKETS_S
from oximeter.buckets import VLLM_REQUEST_LATENCY_BUCKETS_S, VLLM_TTFT_BUCKETS_S
from oximeter.cli import main
from oximeter.config import load_config


def test_defaults_one_objective_per_service_over_four_weeks(tmp_path: Path) -> None:
    path = tmp_path / "oximeter.yaml"
    path.write_text("")
    [objective] = load_config(path).slos.objectives
    assert (objective.service, objective.model, objective.window_s) == ("", "", 28 * 86400.0)
    assert objective.availability is not None
    assert (objective.availability.target, objective.availability.code_regex()) == (0.999, "5..|429")
    assert not objective.availability.counts_client_cutoffs()
    latency = [(lat.indicator, lat.threshold_s, lat.target) for lat in objective.latency]
    assert latency == [("queue_wait", 1.0, 0.99)]
    slos = SloSettings()
    assert (slos.page_fast_burn, slos.page_slow_burn, slos.ticket_burn) == (14.4, 6.0, 1.0)


def test_each_indicator_reads_the_histograms_the_producers_register() -> None:
    bounds = {name: (h.gateway_bounds_s, h.vllm_bounds_s) for name, h in HISTOGRAMS.items()}
    assert bounds == {"ttft": (LATENCY_BUCKETS_S, VLLM_TTFT_BUCKETS_S),
                      "queue_wait": (QUEUE_WAIT_BUCKETS_S, VLLM_REQUEST_LATENCY_BUCKETS_S),
                      "request_duration": (LATENCY_BUCKETS_S, VLLM_REQUEST_LATENCY_BUCKETS_S)}


OBJECTIVE = "slos:\n  objectives:\n    - name: chat\n"


@pytest.mark.parametrize(("text", "expected"), [
    (OBJECTIVE + "      availability: {target: 1.0}\n",
     "slos.objectives.0.availability.target: Input should be less than 1"),
    (OBJECTIVE + "      availability: {bad_codes: [5xx, '42']}\n",
     "slos.objectives.0.availability.bad_codes: Value error, expected status codes such as 503"),
    (OBJECTIVE + "      latency: [{indicator: ttft, threshold_s: 0.3, target: 0.99}]\n",
     "slos.objectives.0.latency.0.threshold_s: Value error, 0.3 s is not a bucket bound of the gateway's "
     "ttft"),
    (OBJECTIVE + "      latency: [{indicator: itl, threshold_s: 1, target: 0.99}]\n",
     "slos.objectives.0.latency.0.indicator: Input should be 'ttft', 'queue_wait' or 'request_duration'"),
    (OBJECTIVE + "      window_s: 86400\n",
     "slos.objectives.0.window_s: Input should be greater than or equal to"),
    (OBJECTIVE + "      servce: chat\n", "slos.objectives.0.servce: unknown key"),
    (OBJECTIVE + "      service: 'chat\"}'\n", "slos.objectives.0.service: String should match pattern"),
    (OBJECTIVE + "    - name: chat\n",
     "slos.objectives: Value error, objective names must be unique, repeated: chat"),
    (OBJECTIVE + "      availability: {target: 0.9}\n",
     "slos: Value error, objectives.0.availability.target: a budget of 0.1 burnt 14.4× is more than "
     "every request"),
    # On stock inputs the threshold must be one of vLLM's bounds too: 0.2 s is only the gateway's.
    ("analyzer: {inputs: stock}\n" + OBJECTIVE
     + "      latency: [{indicator: ttft, threshold_s: 0.2, target: 0.99}]\n",
     "slos.objectives.0.latency.0.threshold_s: 0.2 s is not a bucket bound of vLLM's ttft histogram, "
     "which analyzer.inputs: stock reads"),
])
def test_config_check_names_file_and_key(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str,
                                         expected: str) -> None:
    path = tmp_path / "oximeter.yaml"
    path.write_text(text)
    assert main(["config", "check", str(path)]) == 1
    err = capsys.readouterr().err
    assert f"{path}: {expected}" in err, err


@pytest.mark.parametrize("inputs", ["oximeter", "stock", "mixed"])
def test_a_bound_of_both_histograms_is_ok_on_every_input(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                         inputs: str) -> None:
    path = tmp_path / "oximeter.yaml"
    path.write_text(f"analyzer: {{inputs: {inputs}}}\n" + OBJECTIVE + "      model: m\n"
                    "      availability: null\n"
                    "      latency: [{indicator: ttft, threshold_s: 0.5, target: 0.95}]\n")
    assert main(["config", "check", str(path)]) == 0, capsys.readouterr().err
    assert f"{path}: ok" in capsys.readouterr().out


@pytest.mark.parametrize(("inputs", "bad_codes", "said"), [
    ("stock", "[5xx, '429']", True), ("stock", "[5xx, '499']", False), ("stock", "[4xx]", False),
    ("mixed", "[5xx]", False), ("oximeter", "[5xx]", False),
])
def test_stock_availability_that_nothing_feeds_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                         inputs: str, bad_codes: str, said: bool) -> None:
    path = tmp_path / "oximeter.yaml"
    path.write_text(f"analyzer: {{inputs: {inputs}}}\n" + OBJECTIVE
                    + f"      availability: {{bad_codes: {bad_codes}}}\n")
    assert main(["config", "check", str(path)]) == 0
    out = capsys.readouterr().out
    line = (f"{path}: slos.objectives.0.availability: stock: vLLM reports no 5xx or 429, only aborted "
            "requests, counted when bad_codes holds 499: this objective sees no bad answer")
    assert (line in out) is said, out
