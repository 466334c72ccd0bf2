"""deploy/kubernetes/: every object is valid for Kubernetes, the Prometheus Operator objects have the
fields the operator reads, the rules are the rule files' own, and the pods run commands the CLI parses.

Built-in kinds are checked by kubernetes-validate (it ships the Kubernetes OpenAPI schemas; strict,
so an unknown or misspelt field fails). The Prometheus Operator's CRDs (ServiceMonitor, PodMonitor,
PrometheusRule) are not among its schemas: they are checked here against the subset of the CRDs'
openAPIV3Schema these manifests use, closed to other fields (a misspelt one would be pruned by
the API server without a word), taken from prometheus-operator/prometheus-operator
example/prometheus-operator-crd/monitoring.coreos.com_{servicemonitors,podmonitors,prometheusrules}.yaml
(prometheusrules at 01fad0d64bee2ea20ff20200b86fc0f4ae2744d3, operator v0.82.2; podmonitors at
00749296a6ed0225f09f8bd9849d764f1280d766, v0.91.0).
"""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from alert_rules import alerting_rules, kubernetes, load_groups
from analyzer.incidents.settings import IncidentSettings
from analyzer.service.settings import AnalyzerSettings
from oximeter.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
KUBE = ROOT / "deploy" / "kubernetes"
# The oldest Kubernetes minor the manifests promise, and the newest the package knows.
VERSIONS = ("1.30.0", kubernetes_validate.utils.latest_version())
MONITORING = "monitoring.coreos.com/v1"
MODES = ("oximeter", "stock")


def _documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]


def _manifests() -> list[Path]:
    return sorted(p for p in KUBE.rglob("*.yaml") if p.name != "kustomization.yaml")


def _applied(mode: str) -> list[dict[str, Any]]:
    """The objects ``kubectl apply -k deploy/kubernetes/<mode>`` creates (resources, recursively)."""
    def walk(folder: Path) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        for entry in yaml.safe_load((folder / "kustomization.yaml").read_text(encoding="utf-8"))["resources"]:
            target = (folder / entry).resolve()
            found += walk(target) if target.is_dir() else _documents(target)
        return found
    return walk(KUBE / mode)


def _labels(name: str) -> dict[str, Any]:
    return {"type": "object", "additionalProperties": {"type": "string"}}


_DURATION = {"type": "string", "pattern": r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?"
                                          r"(([0-9]+)s)?(([0-9]+)ms)?)$"}
_RELABEL = {"type": "object", "additionalProperties": False, "properties": {
    "sourceLabels": {"type": "array", "items": {"type": "string"}}, "separator": {"type": "string"},
    "targetLabel": {"type": "string"}, "regex": {"type": "string"}, "replacement": {"type": "string"},
    "action": {"enum": ["replace", "keep", "drop", "labelmap", "labeldrop", "labelkeep", "hashmod"]}}}
_ENDPOINT_FIELDS = {"port": {"type": "string"}, "targetPort": {"type": ["integer", "string"]},
                    "path": {"type": "string"}, "interval": _DURATION, "honorLabels": {"type": "boolean"},
                    "relabelings": {"type": "array", "items": _RELABEL}}
_SELECTOR = {"type": "object", "additionalProperties": False, "properties": {
    "matchLabels": _labels("matchLabels"), "matchExpressions": {"type": "array"}}}
_NAMESPACES = {"type": "object", "additionalProperties": False, "properties": {
    "any": {"type": "boolean"}, "matchNames": {"type": "array", "items": {"type": "string"}}}}


def _monitor(endpoints_key: str) -> dict[str, Any]:
    endpoint = {"type": "object", "additionalProperties": False, "properties": _ENDPOINT_FIELDS,
                "anyOf": [{"required": ["port"]}, {"required": ["targetPort"]}]}
    return {"type": "object", "required": ["spec"], "properties": {"spec": {
        "type": "object", "additionalProperties": False, "required": ["selector", endpoints_key],
        "properties": {"selector": _SELECTOR, "namespaceSelector": _NAMESPACES,
                       endpoints_key: {"type": "array", "minItems": 1, "items": endpoint}}}}}


_RULE = {"type": "object", "additionalProperties": False, "required": ["expr"],
         "oneOf": [{"required": ["record"]}, {"required": ["alert"]}],
         "properties": {"record": {"type": "string"}, "alert": {"type": "string"},
                        "expr": {"type": ["string", "integer"]}, "for": _DURATION,
                        "keep_firing_for": _DURATION, "labels": _labels("labels"),
                        "annotations": _labels("annotations")}}
_GROUP = {"type": "object", "additionalProperties": False, "required": ["name", "rules"],
          "properties": {"name": {"type": "string", "minLength": 1}, "interval": _DURATION,
                         "rules": {"type": "array", "items": _RULE}}}
CRD_SCHEMAS: dict[str, dict[str, Any]] = {
    "ServiceMonitor": _monitor("endpoints"),
    "PodMonitor": _monitor("podMetricsEndpoints"),
    "PrometheusRule": {"type": "object", "required": ["spec"], "properties": {"spec": {
        "type": "object", "additionalProperties": False, "required": ["groups"],
        "properties": {"groups": {"type": "array", "items": _GROUP}}}}},
}


@pytest.mark.parametrize("path", _manifests(), ids=lambda p: str(p.relative_to(KUBE)))
def test_every_object_is_valid(path: Path) -> None:
    docs = _documents(path)
    assert docs, path
    for doc in docs:
        assert doc["metadata"]["name"], path
        if doc["apiVersion"] == MONITORING:
            jsonschema.validate(doc, CRD_SCHEMAS[doc["kind"]])
        else:
            for version in VERSIONS:
                kubernetes_validate.validate(doc, version, strict=True)


def test_the_crd_schemas_reject_what_the_operator_would_drop() -> None:
    """The closed schemas above catch a misspelt field, a rule with both record and alert, and a
    group without a name: each is an object the API server accepts and Prometheus never sees."""
    monitor = _documents(KUBE / "oximeter" / "monitors.yaml")[0]
    monitor["spec"]["podMetricsEndpoints"][0]["relabelings"][0]["target_label"] = "job"
    rule = {"spec": {"groups": [{"name": "g", "rules": [{"record": "a", "alert": "A", "expr": "1"}]}]}}
    nameless = {"spec": {"groups": [{"rules": []}]}}
    for doc, kind in ((monitor, "PodMonitor"), (rule, "PrometheusRule"), (nameless, "PrometheusRule")):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(doc, CRD_SCHEMAS[kind])
    with pytest.raises(kubernetes_validate.ValidationError):
        bad = _documents(KUBE / "common" / "analyzer.yaml")[2]
        bad["spec"]["template"]["spec"]["containers"][0]["argz"] = []
        kubernetes_validate.validate(bad, VERSIONS[0], strict=True)


def test_each_kustomization_lists_its_folders_manifests() -> None:
    for folder in (KUBE / "common", *(KUBE / m for m in MODES)):
        listed = yaml.safe_load((folder / "kustomization.yaml").read_text(encoding="utf-8"))["resources"]
        for entry in listed:
            assert (folder / entry).exists(), (folder, entry)
        files = {p.name for p in folder.glob("*.yaml")} - {"kustomization.yaml"}
        # Examples show what to add to the user's own objects; everything else is applied.
        assert {f for f in files if not f.endswith(".example.yaml")} == {e for e in listed if "/" not in e}


def test_committed_prometheus_rules_are_the_rule_files() -> None:
    """Fails when a rule file changed without `oximeter rules build`."""
    for path, text in kubernetes.rendered().items():
        assert path.read_text(encoding="utf-8") == text, f"{path}: run `oximeter rules build`"


def test_a_rule_file_change_shows_in_the_rendered_objects() -> None:
    gpu = ROOT / "alert_rules" / "gpu.rules.yml"
    changed = gpu.read_text(encoding="utf-8").replace("GpuTemperatureHigh", "GpuTemperatureHot")
    for mode in MODES:
        text = kubernetes.render(mode, {gpu: changed})
        assert "GpuTemperatureHot" in text and "GpuTemperatureHigh" not in text
        assert text != kubernetes.render(mode)


@pytest.mark.parametrize("mode", MODES)
def test_the_rule_objects_hold_every_rule_of_their_files(mode: str) -> None:
    [rule_object] = [d for d in _applied(mode) if d["kind"] == "PrometheusRule"]
    rules = [r for g in rule_object["spec"]["groups"] for r in g["rules"]]
    files = kubernetes.MODES[mode]()
    expected = [r for path in files for g in load_groups(path) for r in g["rules"]]
    assert len(rules) == len(expected) > 0
    names = {r.get("alert") or r["record"] for r in rules}
    platform = {r["alert"] for r in alerting_rules() if r["alert"] in ("TargetDown", "ScrapeJobMissing")}
    # Stock fleets run none of Oximeter's own jobs: the checks of those jobs would always fire.
    assert (platform <= names) == (mode == "oximeter")
    assert ("node:kube_node_ready:max" in names) and (("oximeter_gpu_up" in names) == (mode == "stock"))


def _jobs(mode: str) -> set[str]:
    jobs = set()
    for doc in _applied(mode):
        if doc["kind"] in ("ServiceMonitor", "PodMonitor"):
            spec = doc["spec"]
            for endpoint in spec.get("endpoints", spec.get("podMetricsEndpoints", [])):
                jobs |= {r["replacement"] for r in endpoint["relabelings"] if r.get("targetLabel") == "job"}
    return jobs


def test_scrape_jobs_are_the_ones_the_rules_name() -> None:
    """The operator names a job after its monitor unless relabelled: the platform alerts and the
    stock adapters read the job names deploy/prometheus.yml and deploy/prometheus-stock.yml use."""
    full, stock = ({j["job_name"] for j in yaml.safe_load((ROOT / "deploy" / name).read_text())[
        "scrape_configs"]} for name in ("prometheus.yml", "prometheus-stock.yml"))
    assert _jobs("oximeter") == full | {"kube-state-metrics"}
    # kube-prometheus-stack's own kubelet ServiceMonitor scrapes the kubelets' cAdvisor as job kubelet.
    assert _jobs("stock") | {"kubelet"} == stock | {"oximeter-analyzer"}


def test_monitoring_objects_carry_the_selection_labels() -> None:
    for mode in MODES:
        for doc in _applied(mode):
            if doc["apiVersion"] == MONITORING:
                labels = doc["metadata"]["labels"]
                assert labels.items() >= kubernetes.SELECTION_LABELS.items(), doc["metadata"]["name"]


def test_rbac_is_minimal() -> None:
    """Nothing here calls the Kubernetes API: no role, no binding, no token in any pod."""
    for path in _manifests():
        for doc in _documents(path):
            assert "Role" not in doc["kind"], path
            if doc["kind"] == "ServiceAccount":
                assert doc["automountServiceAccountToken"] is False, path
            pod = _pod_spec(doc)
            if pod is not None:
                assert pod["automountServiceAccountToken"] is False, (path, doc["metadata"]["name"])
                for container in pod["containers"]:
                    if container["image"].startswith("oximeter:"):
                        security = container["securityContext"]
                        assert security["allowPrivilegeEscalation"] is False
                        assert security["capabilities"]["drop"] == ["ALL"]


def _pod_spec(doc: dict[str, Any]) -> dict[str, Any] | None:
    if doc["kind"] in ("Deployment", "DaemonSet", "StatefulSet"):
        spec: dict[str, Any] = doc["spec"]["template"]["spec"]
        return spec
    return None


def _containers() -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    found = []
    for path in _manifests():
        for doc in _documents(path):
            pod = _pod_spec(doc)
            for container in (pod or {}).get("containers", []):
                if container["image"].startswith("oximeter:"):
                    found.append((f"{path.name}:{container['name']}", container, pod))
    return found


CONTAINERS = _containers()


@pytest.mark.parametrize(("name", "container"), [c[:2] for c in CONTAINERS], ids=[c[0] for c in CONTAINERS])
def test_oximeter_containers_run_commands_the_cli_parses(name: str, container: dict[str, Any]) -> None:
    env = {e["name"]: e for e in container.get("env", [])}
    argv = []
    for arg in container["args"]:
        for var in env:
            arg = arg.replace(f"$({var})", "gpu-node-1")
        assert "$(" not in arg, (name, arg)  # Kubernetes expands only variables the container defines
        argv.append(arg)
    command = next(a for a in argv if not a.startswith("-") and argv[argv.index(a) - 1] != "--config")
    args = build_parser(command).parse_args(argv)
    assert args.command == command, shlex.join(argv)
    if "--node" in argv:  # the node label is the Kubernetes node's name, from the downward API
        assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    if "--host" in argv:
        ports = {p["containerPort"] for p in container["ports"]}
        assert int(argv[argv.index("--port") + 1]) in ports
    assert isinstance(args, argparse.Namespace)


@pytest.mark.parametrize("mode", MODES)
def test_the_analyzer_settings_load(mode: str) -> None:
    [config_map] = [d for d in _applied(mode) if d["kind"] == "ConfigMap"]
    settings = yaml.safe_load(config_map["data"]["oximeter.yaml"])
    analyzer = AnalyzerSettings.model_validate(settings["analyzer"])
    incidents = IncidentSettings.model_validate(settings["incidents"])
    assert analyzer.inputs == ("stock" if mode == "stock" else "oximeter")
    [deployment] = [d for d in _applied(mode) if d["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    mounts = {m["mountPath"]: m["name"] for m in pod["containers"][0]["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    # The store lives on the persistent volume; its API port is the one the Service and monitor use.
    assert volumes[mounts[str(Path(incidents.store_path).parent)]]["persistentVolumeClaim"]
    assert pod["containers"][0]["ports"][0]["containerPort"] == incidents.api_port
    assert deployment["spec"]["replicas"] == 1 and deployment["spec"]["strategy"]["type"] == "Recreate"


def test_the_install_takes_five_commands_that_match_the_manifests() -> None:
    """docs/kubernetes.md's install block: at most five commands; its image rewrite reaches every
    Oximeter container a mode applies, and its Secret is the one the analyzer reads."""
    text = (ROOT / "docs" / "kubernetes.md").read_text(encoding="utf-8")
    block = text.split("```sh\n", 1)[1].split("```", 1)[0]
    commands = [line for line in block.splitlines() if line.strip()]
    assert 0 < len(commands) <= 5
    [rewrite] = [c for c in commands if "kubectl apply" in c]
    old = rewrite.split('sed "s|', 1)[1].split("|", 1)[0]
    assert old.startswith("image: ")
    for mode in MODES:
        images = [c["image"] for d in _applied(mode) for c in (_pod_spec(d) or {}).get("containers", [])]
        assert images and all(f"image: {image}" == old for image in images), (mode, images)
    [analyzer] = [c for c in CONTAINERS if c[0] == "analyzer.yaml:analyzer"]
    [ref] = [e["valueFrom"]["secretKeyRef"] for e in analyzer[1]["env"] if e["name"] == "OXIMETER_API_TOKEN"]
    assert ref["optional"] is True  # no Secret: a read-only API, not a pod that cannot start
    assert f"create secret generic {ref['name']} --from-file={ref['key']}=" in block


def test_the_active_standby_example_runs_two_on_postgresql() -> None:
    """common/analyzer-ha.example.yaml: two replicas leading by lease on a PostgreSQL store whose
    password comes from a Secret, no volume, and otherwise the applied analyzer's pod."""
    config_map, deployment = _documents(KUBE / "common" / "analyzer-ha.example.yaml")
    settings = yaml.safe_load(config_map["data"]["oximeter.yaml"])
    analyzer = AnalyzerSettings.model_validate(settings["analyzer"])
    incidents = IncidentSettings.model_validate(settings["incidents"])
    assert analyzer.ha.enabled and analyzer.ha.renew_s * 3 <= analyzer.ha.lease_s
    assert incidents.store_path == settings["reporter"]["store_path"]
    assert incidents.store_path.startswith("postgresql://") and "@" in incidents.store_path
    assert ":" not in incidents.store_path.split("//", 1)[1].split("@", 1)[0]  # no password in the URL
    pod = deployment["spec"]["template"]["spec"]
    env = {e["name"]: e for e in pod["containers"][0]["env"]}
    assert env["OXIMETER_STORE_PASSWORD"]["valueFrom"]["secretKeyRef"]["key"] == "password"
    assert deployment["spec"]["replicas"] == 2 and deployment["spec"]["strategy"]["type"] == "RollingUpdate"
    assert not any("persistentVolumeClaim" in v for v in pod["volumes"])
    [applied] = [d for d in _documents(KUBE / "common" / "analyzer.yaml") if d["kind"] == "Deployment"]
    assert pod["containers"][0]["args"] == applied["spec"]["template"]["spec"]["containers"][0]["args"]
