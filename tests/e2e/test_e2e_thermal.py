"""A thermal throttle on n1 GPU 1 → one infrastructure incident on that GPU whose root cause never
changes, one "opened" and one "resolved" chat message with at most a severity change between them
(the throttled node's queue may cross the line that makes it critical, depending on the load), and
Alertmanager's temperature alert attached to the incident as evidence (relayed by the analyzer, not
sent to chat again). The time-scaled temperature alert fires for that GPU only (``for: 1m`` is 6 s
here; the promtool unit tests keep the real durations), reaches Alertmanager and resolves once the
fault is over. The fault runs alongside an engine stall on n2 (``conftest.py``): n1's incident is
n1's alone."""

from __future__ import annotations

import time

import pytest
from e2e_helpers import (
    THERMAL_ALERT,
    THERMAL_S,
    Faults,
    headline,
    incident,
    incident_messages,
    incidents,
    kind_of,
    new_incidents,
)
from shared_stack import live_timeout_s, open_deadline_s, resolve_deadline_s

from analyzer.incidents.stability import MESSAGE_BUDGET
from reporter.sink import ChatSink
from stack.local import Stack
from stack.procs import wait_until

pytestmark = pytest.mark.e2e


@pytest.mark.timeout(live_timeout_s(open_deadline_s("gpu_temperature", "gpu_sm_clock_ratio"),
                                     resolve_deadline_s(THERMAL_S, "gpu_temperature", "gpu_sm_clock_ratio"),
                                     60, resolve_deadline_s(0.0, "gpu_temperature")))
def test_thermal_throttle_is_one_infrastructure_incident(live_stack: Stack, faults: Faults,
                                                         chat_sink: ChatSink) -> None:
    api, before, t0 = faults.api, faults.before, faults.t0
    (opened,) = wait_until(lambda: new_incidents(api, before, node="n1"),
                           open_deadline_s("gpu_temperature", "gpu_sm_clock_ratio"), interval_s=1.0,
                           what="an incident on n1 after the thermal fault")
    detect_s = time.monotonic() - t0
    labels = opened["root_cause"]["labels"]
    assert (opened["layer"], labels["node"], labels.get("gpu")) == ("infrastructure", "n1", "1"), opened
    wait_until(lambda: incident(api, opened["id"])["state"] == "resolved",
               resolve_deadline_s(THERMAL_S, "gpu_temperature", "gpu_sm_clock_ratio"), interval_s=1.0,
               what="the incident resolved after the fault ended")
    def heads() -> list[str]:
        return incident_messages([m for m in chat_sink.messages if opened["id"] in m.text])

    wait_until(lambda: any("RESOLVED" in h for h in heads()), 60, what="the resolved message in chat")
    final = incident(api, opened["id"])
    assert final["rule"] == "thermal_throttle", final
    sent, told = chat_sink.messages, heads()
    assert "OPENED" in told[0] and "RESOLVED" in told[-1] and len(told) <= MESSAGE_BUDGET, "\n".join(told)
    assert all("SEVERITY UP" in h for h in told[1:-1]), "\n".join(told)
    # Other layers' alerts (TTFT above yesterday: ingress) are forwarded; the temperature alert is not.
    forwarded = [headline(m) for m in sent if kind_of(m) == "alert"]
    assert not any(THERMAL_ALERT in head for head in forwarded), forwarded
    alerts = [c for c in final["changes"] if c["kind"] == "alert" and c["source"] == "alertmanager"]
    assert alerts and any(THERMAL_ALERT in c["description"] for c in alerts), final["changes"]
    assert [i["id"] for i in new_incidents(api, before, node="n1")] == [opened["id"]]
    assert chat_sink.problems == []
    # Prometheus fired the temperature alert for the throttled GPU and no other at any moment since
    # the faults began (read back from its ALERTS series, so nothing between two polls is missed),
    # and what Alertmanager sent the relay (grouped by node) named that node.
    window = f"{time.monotonic() - t0 + 5:.0f}s"
    firing = f'ALERTS{{alertname="{THERMAL_ALERT}", alertstate="firing"}}'
    ever = live_stack.query(f"max_over_time({firing}[{window}])")
    assert [(a["metric"]["node"], a["metric"]["gpu"]) for a in ever] == [("n1", "1")], ever
    relayed = [c["labels"].get("node") for inc in incidents(api) if inc["id"] not in before
               for c in incident(api, inc["id"])["changes"]
               if c["source"] == "alertmanager" and THERMAL_ALERT in c["description"]]
    assert relayed and set(relayed) == {"n1"}, relayed
    wait_until(lambda: not any(a["labels"]["alertname"] == THERMAL_ALERT for a in live_stack.alerts()),
               resolve_deadline_s(0.0, "gpu_temperature"), interval_s=1.0,
               what=f"{THERMAL_ALERT} resolved after the fault ended")
    # n1's incident is n1's alone, also after it resolved: its cleared members (the throttled node's
    # queue among them) joined no other incident, such as the stall's on n2.
    on_n1 = [i["id"] for i in incidents(api) if i["id"] not in before and "n1" in i["nodes"]]
    assert on_n1 == [opened["id"]], [incident(api, i) for i in on_n1 if i != opened["id"]]
    print(f"thermal: incident after {detect_s:.0f} s, resolved after {time.monotonic() - t0:.0f} s")
