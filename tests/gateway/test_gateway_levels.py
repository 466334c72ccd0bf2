"""The gateway's level gauges, read from the admission controller at scrape time: exact values."""

from __future__ import annotations

from gateway.admission import AdmissionController, AdmissionLimits
from gateway.metrics import GatewayMetrics


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 50.0

    def __call__(self) -> float:
        return self.now


def test_oldest_waits_are_gauges_of_the_moment() -> None:
    clock = Clock()
    ctl = AdmissionController(AdmissionLimits(1, 4, 1000.0), clock=clock)
    metrics = GatewayMetrics("chat", "n1", ["m"], ctl)
    labels = {"service": "chat", "model": "m", "node": "n1"}

    def levels() -> tuple[float | None, float | None]:
        get = metrics.registry.get_sample_value
        return (get("oximeter_queue_oldest_wait_seconds", labels),
                get("oximeter_upstream_oldest_unanswered_seconds", labels))

    assert levels() == (0.0, 0.0)
    running = ctl.offer().ticket
    clock.now = 52.0
    ctl.offer()  # queued behind it
    clock.now = 60.0  # the engine has said nothing for 10 s; the queue's head waited 8 s
    assert levels() == (8.0, 10.0)
    assert running is not None
    ctl.first_byte(running)
    assert levels() == (8.0, 0.0)
