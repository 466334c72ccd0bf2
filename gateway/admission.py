"""Admission by concurrency with a bounded FIFO queue and a predicted-wait fail-fast.

Pure logic with an injectable clock: no I/O and no asyncio, so the live gateway
(``gateway/waiting.py`` wraps it for asyncio) and the simulator's history generator (virtual time)
produce gateway signals from the same code.

Admit by *concurrency*, never by QPS (an engine holds sequences, not a rate), and answer 429
with ``Retry-After`` at once when the wait would be hopeless instead of letting the request rot
in the queue.

Usage::

    ctl = AdmissionController(AdmissionLimits(max_concurrency=4, max_queue=8, max_queue_wait_s=1.0),
                              clock=lambda: virtual_now)
    d = ctl.offer()            # ADMITTED (go upstream), QUEUED (wait for release) or REJECTED (429)
    ...
    for t in ctl.release(d.ticket):   # when the upstream request ends; returns tickets admitted now
        start(t)
    ctl.cancel(ticket)         # a queued client went away (counted as 499 by the caller)
    ctl.first_byte(ticket)     # the engine's first byte for an admitted request arrived

A stuck queue shows in the age of its oldest ticket, and a stuck engine in the age of the oldest
admitted ticket without a first byte (``oldest_queued_s``, ``oldest_unanswered_s``), long before
any request ends and is observed.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

Clock = Callable[[], float]


class Outcome(StrEnum):
    """What ``offer()`` decided for one request."""

    ADMITTED = "admitted"
    QUEUED = "queued"
    REJECTED = "rejected"


class RejectReason(StrEnum):
    """Why a request was refused (the ``reason`` label of ``oximeter_rejected_requests_total``)."""

    QUEUE_FULL = "queue_full"
    PREDICTED_WAIT = "predicted_wait"


class TicketState(StrEnum):
    """Where a ticket is in its life."""

    QUEUED = "queued"
    INFLIGHT = "inflight"
    DONE = "done"


@dataclass(frozen=True)
class AdmissionLimits:
    """The knobs: concurrency upstream, queue bound, and the longest wait worth queueing for."""

    max_concurrency: int
    max_queue: int
    max_queue_wait_s: float
    # Weight of the newest service time in the moving average; 0.2 follows a change within ~10
    # completions without jumping on one slow request.
    ewma_alpha: float = 0.2

    def __post_init__(self) -> None:
        if self.max_concurrency < 1:
            raise ValueError("max_concurrency must be >= 1")
        if self.max_queue < 0:
            raise ValueError("max_queue must be >= 0")
        if self.max_queue_wait_s <= 0:
            raise ValueError("max_queue_wait_s must be > 0")
        if not 0 < self.ewma_alpha <= 1:
            raise ValueError("ewma_alpha must be in (0, 1]")


class Ticket:
    """One request known to the controller; identity is the ticket object itself."""

    __slots__ = ("admitted_at", "left_at", "offered_at", "state")

    def __init__(self, offered_at: float) -> None:
        self.offered_at = offered_at
        self.admitted_at: float | None = None
        self.left_at: float | None = None  # when it left the queue unserved
        self.state = TicketState.QUEUED

    def wait_s(self) -> float:
        """Seconds spent queued: until admitted (0 when admitted at once) or until it left the
        queue unserved; 0 while still queued."""
        end = self.admitted_at if self.admitted_at is not None else self.left_at
        return 0.0 if end is None else end - self.offered_at


@dataclass(frozen=True)
class Decision:
    """The answer to ``offer()``.

    ``queue_position`` is the queue length the request joined at (1 = head) when QUEUED, 0 when
    ADMITTED at once, and the queue length it found when REJECTED.
    ``retry_after_s`` (REJECTED only) is a whole-second estimate of when the queue will have drained.
    """

    outcome: Outcome
    ticket: Ticket | None
    queue_position: int
    predicted_wait_s: float
    reason: RejectReason | None = None
    retry_after_s: int = 0


@dataclass(frozen=True)
class AdmissionStats:
    """Counters and levels since construction."""

    inflight: int
    queue_length: int
    admitted_total: int
    completed_total: int
    cancelled_total: int
    rejected_queue_full_total: int
    rejected_predicted_wait_total: int
    service_time_ewma_s: float | None


class AdmissionController:
    """Concurrency limit + bounded FIFO queue + predicted-wait rejection, driven by ``clock``.

    The predicted wait of queue position ``p`` is ``p × S / max_concurrency`` where ``S`` is the
    service-time estimate: the EWMA of observed service times (admission to release), raised to
    the age of the youngest in-flight request when every slot is busy. The raise matters when the
    engine stalls (no completion updates the EWMA) and before the first completion: if even the
    youngest running request is older than ``S``, service is at least that slow.
    """

    def __init__(self, limits: AdmissionLimits, clock: Clock = time.monotonic) -> None:
        self.limits = limits
        self._clock = clock
        # dicts keep insertion order: the queue is FIFO, in-flight is in admission order.
        self._queue: dict[Ticket, None] = {}
        self._inflight: dict[Ticket, None] = {}
        self._unanswered: dict[Ticket, None] = {}  # in flight with no first byte yet, admission order
        self._ewma_s: float | None = None
        self._admitted = 0
        self._completed = 0
        self._cancelled = 0
        self._rejected_full = 0
        self._rejected_wait = 0

    @property
    def queue_length(self) -> int:
        """Requests waiting for a slot."""
        return len(self._queue)

    @property
    def inflight(self) -> int:
        """Requests admitted upstream and not yet released."""
        return len(self._inflight)

    def oldest_queued_s(self) -> float:
        """Seconds the oldest queued request has waited (0 with none queued)."""
        head = next(iter(self._queue), None)
        return 0.0 if head is None else self._clock() - head.offered_at

    def oldest_unanswered_s(self) -> float:
        """Seconds since the oldest admitted request still without a first byte was admitted
        (0 with none)."""
        oldest = next(iter(self._unanswered), None)
        if oldest is None or oldest.admitted_at is None:
            return 0.0
        return self._clock() - oldest.admitted_at

    def first_byte(self, ticket: Ticket) -> None:
        """The engine's first byte for admitted ``ticket`` arrived."""
        self._unanswered.pop(ticket, None)

    def service_estimate_s(self) -> float:
        """Current service-time estimate S (0.0 when nothing is known yet)."""
        estimate = self._ewma_s or 0.0
        if self._inflight and len(self._inflight) >= self.limits.max_concurrency:
            youngest = next(reversed(self._inflight))
            assert youngest.admitted_at is not None
            estimate = max(estimate, self._clock() - youngest.admitted_at)
        return estimate

    def predicted_wait_s(self, position: int) -> float:
        """Expected wait of the request at queue ``position`` (1 = head)."""
        return position * self.service_estimate_s() / self.limits.max_concurrency

    def offer(self) -> Decision:
        """Decide for one arriving request: admit now, queue it, or reject it."""
        now = self._clock()
        if len(self._inflight) < self.limits.max_concurrency and not self._queue:
            ticket = Ticket(now)
            self._admit(ticket, now)
            return Decision(Outcome.ADMITTED, ticket, 0, 0.0)
        position = len(self._queue) + 1
        if position > self.limits.max_queue:
            self._rejected_full += 1
            return self._reject(RejectReason.QUEUE_FULL, len(self._queue))
        wait_s = self.predicted_wait_s(position)
        if wait_s > self.limits.max_queue_wait_s:
            self._rejected_wait += 1
            return self._reject(RejectReason.PREDICTED_WAIT, len(self._queue))
        ticket = Ticket(now)
        self._queue[ticket] = None
        return Decision(Outcome.QUEUED, ticket, position, wait_s)

    def release(self, ticket: Ticket, *, observe: bool = True) -> list[Ticket]:
        """An admitted request ended; return the queued tickets admitted into the freed slots.

        ``observe=False`` keeps a cut-short request (client went away) out of the service-time
        average.
        """
        if ticket.state is not TicketState.INFLIGHT:
            raise ValueError(f"release() of a {ticket.state} ticket")
        now = self._clock()
        del self._inflight[ticket]
        self._unanswered.pop(ticket, None)
        ticket.state = TicketState.DONE
        self._completed += 1
        if observe and ticket.admitted_at is not None:
            service_s = now - ticket.admitted_at
            alpha = self.limits.ewma_alpha
            self._ewma_s = (
                service_s if self._ewma_s is None else alpha * service_s + (1 - alpha) * self._ewma_s
            )
        admitted: list[Ticket] = []
        while self._queue and len(self._inflight) < self.limits.max_concurrency:
            head = next(iter(self._queue))
            del self._queue[head]
            self._admit(head, now)
            admitted.append(head)
        return admitted

    def cancel(self, ticket: Ticket) -> bool:
        """Take a still-queued ticket out of the queue; False when it is not queued any more."""
        if ticket.state is not TicketState.QUEUED or ticket not in self._queue:
            return False
        del self._queue[ticket]
        ticket.left_at = self._clock()
        ticket.state = TicketState.DONE
        self._cancelled += 1
        return True

    def stats(self) -> AdmissionStats:
        """A snapshot of levels and counters."""
        return AdmissionStats(
            inflight=len(self._inflight),
            queue_length=len(self._queue),
            admitted_total=self._admitted,
            completed_total=self._completed,
            cancelled_total=self._cancelled,
            rejected_queue_full_total=self._rejected_full,
            rejected_predicted_wait_total=self._rejected_wait,
            service_time_ewma_s=self._ewma_s,
        )

    def _admit(self, ticket: Ticket, now: float) -> None:
        ticket.admitted_at = now
        ticket.state = TicketState.INFLIGHT
        self._inflight[ticket] = None
        self._unanswered[ticket] = None
        self._admitted += 1

    def _reject(self, reason: RejectReason, queue_length: int) -> Decision:
        drain_s = queue_length * self.service_estimate_s() / self.limits.max_concurrency
        return Decision(
            Outcome.REJECTED,
            None,
            queue_length,
            self.predicted_wait_s(queue_length + 1),
            reason,
            max(1, math.ceil(drain_s)),
        )
