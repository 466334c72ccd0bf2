"""AdmissionController in virtual time: exact decisions, waits, estimates and Retry-After."""

from __future__ import annotations

import asyncio

import pytest

from gateway.admission import (
    AdmissionController,
    AdmissionLimits,
    Outcome,
    RejectReason,
    Ticket,
    TicketState,
)
from gateway.waiting import AsyncAdmission


class VirtualClock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def make(concurrency: int, queue: int, wait_s: float) -> tuple[AdmissionController, VirtualClock]:
    clock = VirtualClock()
    return AdmissionController(AdmissionLimits(concurrency, queue, wait_s), clock=clock), clock


def test_fills_slots_then_queue_then_rejects_queue_full() -> None:
    ctl, _ = make(2, 3, 1000.0)
    decisions = [ctl.offer() for _ in range(7)]
    assert [d.outcome for d in decisions] == [Outcome.ADMITTED] * 2 + [Outcome.QUEUED] * 3 + [
        Outcome.REJECTED
    ] * 2
    assert [d.queue_position for d in decisions] == [0, 0, 1, 2, 3, 3, 3]
    assert decisions[5].reason is RejectReason.QUEUE_FULL
    # Nothing observed yet: no estimate, so Retry-After is the 1 s floor.
    assert decisions[5].retry_after_s == 1
    assert (ctl.inflight, ctl.queue_length) == (2, 3)
    stats = ctl.stats()
    assert (stats.admitted_total, stats.rejected_queue_full_total, stats.rejected_predicted_wait_total) == (
        2,
        2,
        0,
    )


def test_release_admits_queue_head_fifo_and_records_waits() -> None:
    ctl, clock = make(1, 5, 1000.0)
    first = ctl.offer().ticket
    queued = [ctl.offer().ticket for _ in range(3)]
    assert first is not None and all(t is not None for t in queued)
    clock.now += 2.0
    assert ctl.release(first) == [queued[0]]
    assert queued[0] is not None and queued[0].wait_s() == 2.0
    assert queued[0].state is TicketState.INFLIGHT
    assert ctl.stats().service_time_ewma_s == 2.0
    clock.now += 1.0
    assert ctl.release(queued[0]) == [queued[1]]
    # EWMA with alpha 0.2: 0.2 × 1.0 + 0.8 × 2.0
    assert ctl.stats().service_time_ewma_s == pytest.approx(1.8)
    assert queued[1] is not None and queued[1].wait_s() == 3.0


@pytest.mark.parametrize(
    ("concurrency", "service_s", "max_wait_s", "expected_positions"),
    [
        # predicted wait of position p = p × S / C; queued while ≤ max_wait, rejected beyond.
        (4, 2.0, 1.0, [1, 2]),  # 1×0.5, 2×0.5 ≤ 1; 3×0.5 > 1
        (1, 2.0, 1.0, []),  # 1×2 > 1: even the head of the queue would wait too long
        (2, 0.5, 1.0, [1, 2, 3, 4]),  # p × 0.25 ≤ 1 up to 4
    ],
)
def test_predicted_wait_rejects_while_queue_is_short(
    concurrency: int, service_s: float, max_wait_s: float, expected_positions: list[int]
) -> None:
    ctl, clock = make(concurrency, 1000, max_wait_s)
    # One observed completion teaches the service time, then fill every slot again at once.
    warm = ctl.offer().ticket
    assert warm is not None
    clock.now += service_s
    ctl.release(warm)
    for _ in range(concurrency):
        assert ctl.offer().outcome is Outcome.ADMITTED
    decisions = [ctl.offer() for _ in range(10)]
    queued = [d.queue_position for d in decisions if d.outcome is Outcome.QUEUED]
    assert queued == expected_positions
    rejected = [d for d in decisions if d.outcome is Outcome.REJECTED]
    assert len(rejected) == 10 - len(expected_positions)
    assert all(d.reason is RejectReason.PREDICTED_WAIT for d in rejected)
    # Retry-After: time to drain the current queue, whole seconds, at least 1.
    drain_s = len(expected_positions) * service_s / concurrency
    assert rejected[0].retry_after_s == max(1, -(-drain_s // 1))


def test_stalled_engine_raises_estimate_from_youngest_inflight_age() -> None:
    ctl, clock = make(2, 100, 1.0)
    ctl.offer()
    clock.now += 1.0
    ctl.offer()
    # No completion yet; youngest in-flight is 3 s old after this step: S ≥ 3 s, p=1 waits 1.5 s.
    clock.now += 3.0
    assert ctl.service_estimate_s() == 3.0
    decision = ctl.offer()
    assert (decision.outcome, decision.reason) == (Outcome.REJECTED, RejectReason.PREDICTED_WAIT)
    assert decision.predicted_wait_s == 1.5


def test_cancel_only_removes_queued_tickets() -> None:
    ctl, _ = make(1, 4, 1000.0)
    running = ctl.offer().ticket
    queued = [ctl.offer().ticket for _ in range(3)]
    assert running is not None and queued[1] is not None
    assert ctl.cancel(queued[1]) is True
    assert ctl.cancel(queued[1]) is False
    assert ctl.cancel(running) is False
    assert ctl.queue_length == 2
    assert ctl.release(running) == [queued[0]]
    assert ctl.stats().cancelled_total == 1
    with pytest.raises(ValueError):
        ctl.release(running)


def test_release_without_observation_keeps_the_average() -> None:
    ctl, clock = make(1, 0, 1.0)
    ticket = ctl.offer().ticket
    assert ticket is not None
    clock.now += 0.01
    ctl.release(ticket, observe=False)
    assert ctl.stats().service_time_ewma_s is None
    assert ctl.stats().completed_total == 1


@pytest.mark.parametrize(
    ("concurrency", "queue", "wait_s", "alpha"),
    [(0, 1, 1.0, 0.2), (1, -1, 1.0, 0.2), (1, 1, 0.0, 0.2), (1, 1, 1.0, 0.0)],
)
def test_limits_validated_at_construction(concurrency: int, queue: int, wait_s: float, alpha: float) -> None:
    with pytest.raises(ValueError):
        AdmissionLimits(concurrency, queue, wait_s, alpha)


def test_async_adapter_wakes_fifo_and_cancelled_waiter_leaves_queue() -> None:
    async def scenario() -> list[str]:
        ctl, _ = make(1, 10, 1000.0)
        adm = AsyncAdmission(ctl)
        order: list[str] = []
        first = adm.offer().ticket
        assert first is not None

        async def waiter(name: str, ticket: Ticket) -> None:
            await adm.wait(ticket)
            order.append(name)
            adm.release(ticket)

        tickets = [adm.offer().ticket for _ in range(3)]
        tasks = [asyncio.create_task(waiter(n, t)) for n, t in zip("abc", tickets, strict=True) if t]
        await asyncio.sleep(0)
        tasks[1].cancel()  # "b" gives up while queued
        await asyncio.sleep(0)
        assert ctl.queue_length == 2
        adm.release(first)
        await asyncio.gather(tasks[0], tasks[2])
        assert tasks[1].cancelled()
        assert (ctl.inflight, ctl.queue_length, ctl.stats().cancelled_total) == (0, 0, 1)
        return order

    assert asyncio.run(scenario()) == ["a", "c"]


def test_ages_of_the_oldest_queued_and_unanswered_requests() -> None:
    """A stuck queue or engine shows at once in the ages it holds, before any request ends."""
    ctl, clock = make(2, 10, 1000.0)
    assert (ctl.oldest_queued_s(), ctl.oldest_unanswered_s()) == (0.0, 0.0)
    a, b = ctl.offer().ticket, ctl.offer().ticket  # admitted at 100
    clock.now = 101.0
    c = ctl.offer().ticket  # queued at 101
    clock.now = 102.0
    d = ctl.offer().ticket  # queued at 102
    assert a is not None and b is not None and c is not None and d is not None
    clock.now = 104.5
    assert (ctl.oldest_queued_s(), ctl.oldest_unanswered_s()) == (3.5, 4.5)
    ctl.first_byte(a)
    assert ctl.oldest_unanswered_s() == 4.5  # b, admitted with a, still has nothing
    ctl.first_byte(b)
    assert ctl.oldest_unanswered_s() == 0.0
    assert ctl.cancel(c)  # the head leaves unserved at 104.5 after 3.5 s
    assert (c.wait_s(), ctl.oldest_queued_s()) == (3.5, 2.5)
    clock.now = 106.0
    assert ctl.release(a) == [d]  # d admitted at 106 after 4 s; nothing from the engine yet
    assert (d.wait_s(), ctl.oldest_queued_s(), ctl.oldest_unanswered_s()) == (4.0, 0.0, 0.0)
    clock.now = 107.25
    assert ctl.oldest_unanswered_s() == 1.25
    ctl.release(d, observe=False)  # released without a first byte (a timeout): no longer waited on
    assert ctl.oldest_unanswered_s() == 0.0
