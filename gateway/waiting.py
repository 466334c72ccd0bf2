"""The asyncio side of admission: a queued request awaits its slot, a freed slot wakes the next.

All decisions stay in ``AdmissionController``; this adapter only maps tickets to futures and
makes sure a cancelled waiter (the client went away) never leaks a slot.
"""

from __future__ import annotations

import asyncio

from gateway.admission import AdmissionController, Decision, Outcome, Ticket, TicketState


class AsyncAdmission:
    """Wrap an ``AdmissionController`` for one event loop."""

    def __init__(self, controller: AdmissionController) -> None:
        self.controller = controller
        self._waiters: dict[Ticket, asyncio.Future[None]] = {}

    def offer(self) -> Decision:
        """``controller.offer()``; a QUEUED ticket gets a future that ``wait()`` awaits."""
        decision = self.controller.offer()
        if decision.outcome is Outcome.QUEUED and decision.ticket is not None:
            self._waiters[decision.ticket] = asyncio.get_running_loop().create_future()
        return decision

    async def wait(self, ticket: Ticket) -> None:
        """Wait until ``ticket`` is admitted. If cancelled meanwhile, the ticket leaves the queue
        (or, if admitted in the same instant, its slot is released) before the error propagates."""
        future = self._waiters.get(ticket)
        if future is None:
            return
        try:
            await future
        except asyncio.CancelledError:
            if not self.controller.cancel(ticket) and ticket.state is TicketState.INFLIGHT:
                self.release(ticket, observe=False)
            raise
        finally:
            self._waiters.pop(ticket, None)

    def release(self, ticket: Ticket, *, observe: bool = True) -> None:
        """The request's upstream part ended: free its slot and wake the tickets admitted into it."""
        for admitted in self.controller.release(ticket, observe=observe):
            future = self._waiters.get(admitted)
            if future is not None and not future.done():
                future.set_result(None)
