"""Messages the reporter tests send."""

from __future__ import annotations

from reporter.message import Link, Message, Section


def alert(key: str = "incident-7:opened:1", **overrides: object) -> Message:
    """A typical incident alert."""
    fields: dict[str, object] = dict(
        title="queue_wait p99 4.2 s on llm@node-1 (scheduling_bottleneck)",
        severity="critical",
        fields=(("layer", "scheduling"), ("root cause", "gateway concurrency limit"), ("node", "node-1")),
        sections=(Section("Diagnosis", "queue_wait p99 4.2 s vs 0.15 s yesterday; GPU util 22 %"),
                  Section("Impact", "1.8 % of requests answered 504 in the last 5 min")),
        links=(Link("Dashboard", "http://127.0.0.1:3000/d/overview?from=1&to=2"),
               Link("Incident", "http://127.0.0.1:8080/api/incidents/7")),
        simulation=True,
        idempotency_key=key,
    )
    fields.update(overrides)
    return Message(**fields)  # type: ignore[arg-type]
