"""The demo's additions to the local stack: the analyzer add-on, its generated config, the drill.

Shared by ``oximeter demo`` and the end-to-end tests (``tests/e2e``), so both run the same
analyzer configuration. Time is compressed by ``scale``: Prometheus loads rules with durations
divided by it (``StackOptions.time_scale``) and the analyzer's persistence (each signal's ``for``,
clear and cooldown windows, the incident resolve/lookback/reopen windows) is divided alike, while
baselines stay real (yesterday is a backfilled day ago).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests
import yaml

from oximeter.errors import ConfigError
from stack.backfill import BackfillResult, BackfillSpec, build_backfill
from stack.config import ANALYZER_JOB
from stack.options import Addon, Endpoints
from stack.procs import oximeter_argv

DEMO_SCALE = 10.0
# Alertmanager holds a new group this long before the relay sees it: the analyzer, judging the same
# persistence as the alert rule, opens its incident first, so the alert is attached, not forwarded.
ALERT_GROUP_WAIT_S = 10.0
# The analyzer's live window, and how long before the stack starts the backfilled history ends:
# longer than the window, so the analyzer never sees the backfill stop and live samples begin after
# a gap (a stretch of missing samples after present ones is exactly what gpu_series_vanished flags).
LIVE_WINDOW_S = 300.0
BACKFILL_GAP_S = LIVE_WINDOW_S + 60.0
CHAT_URL_ENV = "OXIMETER_DEMO_CHAT_URL"  # the chat sink's webhook URL (with its key) reaches the daemon here
LIBRARY = Path(__file__).resolve().parent.parent / "simulator" / "scenarios"


def analyzer_config(workspace: Path, prometheus_url: str, *, scale: float, step_s: float = 2.0,
                    interval_s: float = 2.0, use_recording_rules: bool = True,
                    api_url: str = "http://127.0.0.1:9471", inputs: str = "oximeter",
                    simulated: bool = True) -> dict[str, Any]:
    """The one YAML config ``oximeter analyze`` and ``oximeter report`` read in the demo.
    ``simulated``: the engines are the simulator's, and every chat message says so."""
    from analyzer.signals.catalogue import CATALOGUE

    signals: dict[str, dict[str, Any]] = {}
    for name, spec in CATALOGUE.items():
        scaled: dict[str, Any] = {"for_s": spec.for_s / scale}
        if spec.clear_s is not None:
            scaled["clear_s"] = spec.clear_s / scale
        if spec.cooldown_s:
            scaled["cooldown_s"] = spec.cooldown_s / scale
        signals[name] = scaled
    # The analyzer does not judge its own scrape target: it starts after Prometheus (its first
    # scrapes fail), and it cannot report its own absence (ScrapeJobMissing and Watchdog do).
    signals["target_down"]["promql"] = f'up{{job!="{ANALYZER_JOB}"}}'
    # An idle GPU lowers its clocks by design (clock event reason "idle"): the SM-clock drop counts
    # only on a GPU that is doing work, or the seconds before traffic starts open an incident. The
    # daemon's live pipeline does not apply ``min_traffic`` guards, so the condition is in the query.
    signals["gpu_sm_clock_ratio"].update(record=None, promql=(
        "max without (instance, job) (oximeter_gpu_sm_clock_hertz) "
        "/ max without (instance, job) (oximeter_gpu_sm_clock_max_hertz) "
        "and on (node, gpu) max without (instance, job) (oximeter_gpu_utilization_ratio) >= 0.05"))
    return {
        "analyzer": {
            "prometheus": {"url": prometheus_url, "use_recording_rules": use_recording_rules,
                           "timeout_s": 20},
            "step_s": step_s, "interval_s": interval_s, "live_window_s": LIVE_WINDOW_S, "signals": signals,
            "inputs": inputs,
        },
        "incidents": {
            "store_path": str(workspace / "oximeter.db"), "api_host": "127.0.0.1",
            "lookback_s": 900 / scale, "resolve_after_s": 300 / scale, "reopen_window_s": 3600 / scale,
            "root_cause_dwell_s": 300 / scale,
        },
        "reporter": {
            "store_path": str(workspace / "oximeter.db"), "simulated": simulated, "api_url": api_url,
            "channels": {"wecom": {"type": "wecom", "url_env": CHAT_URL_ENV}},
            "retry_base_s": 1.0, "retry_max_s": 10.0, "watchdog_timeout_s": 0,
            "digest": {"prometheus_url": prometheus_url},
        },
    }


def analyzer_addon(workspace: Path, chat_url: str, token_file: Path, *, scale: float = 10.0,
                   name: str = "analyzer", **config: Any) -> Addon:
    """``oximeter analyze`` as a stack add-on: scraped by Prometheus, Alertmanager's webhook target.

    Its config is written when the stack knows Prometheus's URL (``argv`` is called then). Its API
    binds port 0 and reports the port in ``port_file`` (chat links follow it, see ``oximeter analyze``).
    """
    def argv(ep: Endpoints, port_file: Path) -> list[str]:
        path = workspace / ("oximeter.yaml" if name == "analyzer" else f"{name}.yaml")
        doc = analyzer_config(workspace, ep.prometheus, scale=scale, **config)
        path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
        return oximeter_argv("--config", str(path), "analyze", "--port", "0", "--port-file", str(port_file))

    return Addon(name=name, argv=argv, ready_path="/metrics", scrape_job=ANALYZER_JOB,
                 webhook_path="/api/alertmanager",
                 env={CHAT_URL_ENV: chat_url, "OXIMETER_API_TOKEN_FILE": str(token_file)})


def prebuild_backfill(spec: BackfillSpec, folder: Path, *, gap_s: float = BACKFILL_GAP_S) -> BackfillResult:
    """Build the history ending ``gap_s`` ago (``Stack`` then reuses it: same spec, same folder).

    A finished backfill there is reused as it is: its end only moves further into the past.
    """
    from alert_rules import rule_files
    from stack.local import find_binaries

    bins = find_binaries(["prometheus", "promtool"])
    end_s = math.floor((time.time() - gap_s) / spec.step_s) * spec.step_s
    return build_backfill(spec, folder, rule_files=rule_files(), promtool=bins["promtool"],
                          prometheus=bins["prometheus"], end_s=end_s)


@dataclass(frozen=True)
class DemoFault:
    """One fault as the demo injects it."""

    kind: str
    node: str
    gpu: int | None
    strength: float | None
    duration_s: float


@dataclass(frozen=True)
class DemoDrill:
    """A library scenario's faults and truth, replayed now for ``fault_s`` seconds."""

    name: str
    description: str
    faults: tuple[dict[str, Any], ...]
    truth: dict[str, Any]
    fault_s: float

    @classmethod
    def from_scenario(cls, name_or_path: str, *, fault_s: float) -> DemoDrill:
        """Load ``simulator/scenarios/<name>.yaml`` (or a path); history-only faults are refused."""
        from simulator.fault_kinds import FAULT_KINDS
        from simulator.scenario import load_scenario

        path = Path(name_or_path)
        if not path.is_file():
            path = LIBRARY / f"{name_or_path}.yaml"
        if not path.is_file():
            known = ", ".join(sorted(p.stem for p in LIBRARY.glob("*.yaml")))
            raise ConfigError([f"scenario: no scenario {name_or_path!r} (known: {known})"], None)
        sc = load_scenario(path)
        history_only = sorted({f.kind for f in sc.faults if FAULT_KINDS[f.kind].history_only})
        if history_only:
            raise ConfigError([f"scenario: {sc.name} needs history-only faults ({', '.join(history_only)}); "
                               "try `oximeter drill --replay` for it"], str(path))
        description = " ".join(sc.description.split()) or sc.name
        return cls(sc.name, description, tuple(f.model_dump() for f in sc.faults), sc.truth.model_dump(),
                   fault_s)


def drill_faults(drill: DemoDrill, nodes: Sequence[str], gpus_per_node: int) -> list[DemoFault]:
    """The drill's faults on this fleet: GPU indices folded into the fleet's GPUs, ``fault_s`` long."""
    out = []
    for f in drill.faults:
        node = f["node"] if f["node"] in nodes else nodes[0]
        gpu = None if f.get("gpu") is None else int(f["gpu"]) % gpus_per_node
        out.append(DemoFault(f["kind"], node, gpu, f.get("strength"), drill.fault_s))
    return out


class IncidentWatch:
    """Polls ``/api/incidents`` and reports each incident's first sighting and its resolution."""

    def __init__(self, api_url: str) -> None:
        self.api_url = api_url.rstrip("/")
        self.seen: dict[str, dict[str, Any]] = {}

    def poll(self) -> list[tuple[dict[str, Any], str]]:
        """``(incident, "opened" | "resolved")`` for what changed since the last poll."""
        try:
            reply = requests.get(f"{self.api_url}/api/incidents", timeout=10)
            reply.raise_for_status()
        except requests.RequestException:
            return []  # the daemon may be busy for a cycle; the next poll catches up
        changed = []
        for incident in reply.json()["incidents"]:
            before = self.seen.get(incident["id"])
            if before is None:
                changed.append((incident, "opened"))
                if incident["state"] == "resolved":
                    changed.append((incident, "resolved"))
            elif before["state"] != "resolved" and incident["state"] == "resolved":
                changed.append((incident, "resolved"))
            self.seen[incident["id"]] = incident
        return changed


def describe_incident(incident: dict[str, Any]) -> str:
    """Layer, root cause and diagnosis, as the demo prints them."""
    cause = incident["root_cause"]
    labels = ", ".join(f"{k}={v}" for k, v in sorted(cause["labels"].items())
                       if k in ("node", "gpu", "service"))
    return (f"[bold]layer[/]: {incident['layer']}   [bold]severity[/]: {incident['severity']}   "
            f"[bold]state[/]: {incident['state']}\n"
            f"[bold]root cause[/]: {cause['signal']} on {labels}\n"
            f"[bold]diagnosis[/]: {incident['diagnosis']['rule']} — {incident['diagnosis']['sentence']}\n"
            f"[bold]id[/]: {incident['id']}")
