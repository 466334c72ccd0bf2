"""The stack's rendered configurations are valid for the real binaries; missing binaries fail early."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from alert_rules import rule_files
from stack.config import (
    ENGINE_JOB,
    EXPORTER_JOB,
    GATEWAY_JOB,
    Target,
    Webhook,
    alertmanager_config,
    prometheus_config,
    stable_instance,
    write_yaml,
)
from stack.local import StackError, find_binaries

TARGETS = [
    Target(ENGINE_JOB, "127.0.0.1:8100", stable_instance(ENGINE_JOB, "n1"), {"node": "n1"}),
    Target(GATEWAY_JOB, "127.0.0.1:8000", stable_instance(GATEWAY_JOB, "n1")),
    Target(EXPORTER_JOB, "127.0.0.1:9400", stable_instance(EXPORTER_JOB, "n1")),
]


def test_prometheus_config_passes_promtool(tmp_path: Path) -> None:
    config = prometheus_config(TARGETS, rule_files(), scrape_interval_s=1, eval_interval_s=0.5,
                               alertmanager="127.0.0.1:9093")
    path = write_yaml(tmp_path / "prometheus.yml", config)
    result = subprocess.run([find_binaries(["promtool"])["promtool"], "check", "config", str(path)],
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert config["global"] == {"scrape_interval": "1s", "evaluation_interval": "500ms"}
    jobs = {c["job_name"]: c for c in config["scrape_configs"]}
    labels = {job: [g["labels"] for g in c["static_configs"]] for job, c in jobs.items()}
    assert labels == {ENGINE_JOB: [{"instance": "n1:8000", "node": "n1"}],
                      GATEWAY_JOB: [{"instance": "n1:9000"}], EXPORTER_JOB: [{"instance": "n1:9400"}]}
    assert {job: c.get("honor_labels", False) for job, c in jobs.items()} == {
        ENGINE_JOB: True, GATEWAY_JOB: False, EXPORTER_JOB: False}


@pytest.mark.parametrize("webhook", [None, Webhook("http://127.0.0.1:9471/api/alertmanager", Path("/t"))])
def test_alertmanager_config_keeps_deploy_routes(tmp_path: Path, webhook: Webhook | None) -> None:
    config = alertmanager_config(group_wait_s=1, group_interval_s=1, repeat_interval_s=60, webhook=webhook)
    path = write_yaml(tmp_path / "alertmanager.yml", config)
    result = subprocess.run(["amtool", "check-config", str(path)], capture_output=True, text=True, timeout=60,
                            check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    deploy = yaml.safe_load((Path(__file__).parents[2] / "deploy" / "alertmanager.yml").read_text())
    assert config["inhibit_rules"] == deploy["inhibit_rules"]
    assert (config["route"]["group_wait"], config["route"]["group_interval"]) == ("1s", "1s")
    assert config["route"]["routes"][0]["group_interval"] == "1s"
    hooks = config["receivers"][0].get("webhook_configs")
    if webhook is None:
        assert hooks is None
    else:
        assert hooks == [{"url": webhook.url, "send_resolved": True, "http_config": {
            "authorization": {"type": "Bearer", "credentials_file": "/t"}}}]


def test_missing_binaries_fail_early_naming_each(tmp_path: Path) -> None:
    with pytest.raises(StackError) as info:
        find_binaries(["prometheus", "alertmanager"], search_path=str(tmp_path))
    text = str(info.value)
    assert "prometheus (Debian package prometheus)" in text
    assert "prometheus-alertmanager (Debian package prometheus-alertmanager)" in text
    assert "make doctor" in text
