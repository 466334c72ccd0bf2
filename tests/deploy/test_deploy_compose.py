"""compose.yml: referenced services, files and secrets exist, host ports are unique and loopback,
commands parse with the real CLI, and Prometheus's targets are compose services."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from dashboards.build import load_built
from oximeter.cli import COMMANDS, build_parser
from oximeter.config import load_config
from simulator.settings import SimSettings
from simulator.traffic import check_loopback

ROOT = Path(__file__).resolve().parents[2]
COMPOSE: dict[str, Any] = yaml.safe_load((ROOT / "compose.yml").read_text())  # resolves <<: merges
SERVICES: dict[str, dict[str, Any]] = COMPOSE["services"]
PROMETHEUS = yaml.safe_load((ROOT / "deploy" / "prometheus.yml").read_text())
# Commands compose runs that a later issue adds to the CLI.


def _profiles(service: dict[str, Any]) -> set[str]:
    return set(service.get("profiles", []))


def test_profiles_sim_and_gpu() -> None:
    assert set().union(*(_profiles(s) for s in SERVICES.values())) == {"sim", "gpu"}
    by_profile = {p: {n for n, s in SERVICES.items() if p in _profiles(s)} for p in ("sim", "gpu")}
    assert by_profile["sim"] == {"simulator", "gateway-n1", "gateway-n2", "exporter-n1", "exporter-n2",
                                 "traffic-n1", "traffic-n2"}
    assert by_profile["gpu"] == {"vllm", "gateway-gpu", "exporter-gpu"}
    shared = {n for n, s in SERVICES.items() if not _profiles(s)}
    assert shared == {"redis", "prometheus", "alertmanager", "grafana", "analyzer"}


def test_gpu_profile_runs_real_vllm_on_nvidia() -> None:
    vllm = SERVICES["vllm"]
    assert vllm["image"].startswith("vllm/vllm-openai:")
    assert "${VLLM_MODEL" in " ".join(vllm["command"])
    for name in ("vllm", "exporter-gpu"):
        devices = SERVICES[name]["deploy"]["resources"]["reservations"]["devices"]
        assert devices[0]["driver"] == "nvidia" and "gpu" in devices[0]["capabilities"]
    for name, backend in (("exporter-gpu", "nvml"), ("exporter-n1", "sim"), ("exporter-n2", "sim")):
        argv = SERVICES[name]["command"]
        assert argv[argv.index("--backend") + 1] == backend


def test_referenced_services_secrets_and_volumes_exist() -> None:
    volumes = set(COMPOSE.get("volumes", {}))
    secrets = set(COMPOSE.get("secrets", {}))
    for name, service in SERVICES.items():
        assert set(service.get("depends_on", [])) <= set(SERVICES), name
        assert set(service.get("secrets", [])) <= secrets, name
        for mount in service.get("volumes", []):
            source = mount.split(":")[0]
            if not source.startswith("."):
                assert source in volumes, (name, source)
    for secret in COMPOSE["secrets"].values():
        assert set(secret) == {"environment"}  # from the environment, never a committed file


def test_mounted_and_built_files_exist() -> None:
    for name, service in SERVICES.items():
        for mount in service.get("volumes", []):
            source = mount.split(":")[0]
            if source.startswith("."):
                assert (ROOT / source).exists(), (name, source)
        build = service.get("build")
        if build:
            assert (ROOT / build["context"] / build["dockerfile"]).is_file(), name
    dockerfile = (ROOT / "deploy" / "Dockerfile").read_text()
    for source in re.findall(r"^COPY (\S+)", dockerfile, flags=re.M):
        assert (ROOT / source).exists(), source


def _host_ports(service: dict[str, Any]) -> list[tuple[str, int]]:
    out = []
    for spec in service.get("ports", []):
        parts = str(spec).split(":")
        assert len(parts) == 3, f"{spec}: publish as 127.0.0.1:HOST:CONTAINER"
        out.append((parts[0], int(parts[1])))
    return out


def test_host_ports_are_loopback_and_unique() -> None:
    seen: dict[int, str] = {}
    for name, service in SERVICES.items():
        for address, port in _host_ports(service):
            assert address == "127.0.0.1", (name, port)
            assert port not in seen, f"host port {port}: {seen.get(port)} and {name}"
            seen[port] = name


@pytest.mark.parametrize("name", sorted(n for n, s in SERVICES.items() if s.get("image") == "oximeter:local"))
def test_oximeter_commands_parse_with_the_real_cli(name: str) -> None:
    argv = [str(a) for a in SERVICES[name]["command"]]
    assert argv[:2] == ["--config", "/etc/oximeter/oximeter.yaml"]
    command = argv[2]
    assert command in COMMANDS, f"compose runs an unknown command {command!r}"
    args = build_parser(command).parse_args(argv)
    assert getattr(args, "func", None) is not None, argv


def test_compose_config_file_is_valid() -> None:
    config = load_config(ROOT / "deploy" / "oximeter.compose.yaml")
    assert config.analyzer.prometheus.url == "http://prometheus:9090"
    assert config.incidents.api_port == 9471


def test_prometheus_targets_are_compose_services() -> None:
    names = {name for job in PROMETHEUS["scrape_configs"] for sd in job.get("dns_sd_configs", [])
             for name in sd["names"]}
    assert names <= set(SERVICES)
    alertmanagers = {target.split(":")[0] for am in PROMETHEUS["alerting"]["alertmanagers"]
                     for static in am["static_configs"] for target in static["targets"]}
    assert alertmanagers == {"alertmanager"} and "alertmanager" in SERVICES


def test_gateways_point_at_compose_engines() -> None:
    for name in ("gateway-n1", "gateway-n2", "gateway-gpu"):
        argv = SERVICES[name]["command"]
        host = re.match(r"http://([\w-]+):\d+", argv[argv.index("--upstream") + 1])
        assert host and host.group(1) in SERVICES, name


def test_grafana_mounts_what_provisioning_reads() -> None:
    provider = yaml.safe_load((ROOT / "deploy/grafana/provisioning/dashboards/oximeter.yml").read_text())
    path = provider["providers"][0]["options"]["path"]
    assert f"./dashboards/build:{path}:ro" in SERVICES["grafana"]["volumes"]
    datasource = yaml.safe_load((ROOT / "deploy/grafana/provisioning/datasources/prometheus.yml").read_text())
    url = datasource["datasources"][0]["url"]
    assert re.match(r"http://prometheus:9090$", url)
    assert datasource["datasources"][0]["jsonData"]["timeInterval"] == PROMETHEUS["global"]["scrape_interval"]


def _flag(argv: list[Any], flag: str) -> str:
    return str(argv[argv.index(flag) + 1])


def test_the_sim_profile_sends_traffic_to_every_gateway() -> None:
    # Each sim gateway gets one traffic generator in its network namespace, aimed at its port on
    # loopback (the only targets the generator accepts), with the model the simulator serves.
    gateways = {n for n, s in SERVICES.items() if "sim" in _profiles(s) and s["command"][2] == "gateway"}
    traffic = {n: s for n, s in SERVICES.items() if "sim" in _profiles(s) and s["command"][2] == "traffic"}
    assert gateways == {"gateway-n1", "gateway-n2"}
    served_by = {s["network_mode"].removeprefix("service:"): s for s in traffic.values()}
    assert set(served_by) == gateways and len(traffic) == len(gateways)
    for gateway, service in served_by.items():
        argv = [str(a) for a in service["command"]]
        args = build_parser("traffic").parse_args(argv)
        assert args.target == [f"http://127.0.0.1:{_flag(SERVICES[gateway]['command'], '--port')}"]
        assert [check_loopback(t) for t in args.target] == args.target
        assert args.model == SimSettings().model and args.base_rps > 0
        assert gateway in service["depends_on"] and "ports" not in service


def test_grafana_reads_incidents_from_the_analyzer() -> None:
    # The dashboards' annotations ask an Infinity datasource; compose installs the plugin and
    # provisions one whose base URL is the analyzer's API, and no other host.
    provisioned = yaml.safe_load((ROOT / "deploy/grafana/provisioning/datasources/analyzer.yml").read_text())
    [source] = provisioned["datasources"]
    annotations = {a["datasource"]["type"] for d in load_built().values() for a in d["annotations"]["list"]}
    assert annotations == {source["type"]}
    assert source["type"] in SERVICES["grafana"]["environment"]["GF_INSTALL_PLUGINS"].split(",")
    port = load_config(ROOT / "deploy" / "oximeter.compose.yaml").incidents.api_port
    assert source["url"] == f"http://analyzer:{port}"
    assert source["jsonData"]["allowedHosts"] == [source["url"]]
    assert "analyzer" in SERVICES["grafana"]["depends_on"]
