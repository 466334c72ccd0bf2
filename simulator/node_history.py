"""One node of a history run: engine, GPUs, dependency and gateway on a virtual clock.

A stock-telemetry scenario (``telemetry: stock``) has no gateway: clients send to the engine,
which queues what it cannot run, and the node is scraped as a stock fleet is: the engine's own
vLLM series, dcgm-exporter's default fields and its share of kube-state-metrics.

The gateway's signals come from the gateway's own ``AdmissionController`` and ``GatewayMetrics``,
the GPU series from the exporter's own ``GpuCollector`` over the in-process fleet, the engine's from
``simulator/exposition.py``: the same code that serves them live. Requests run through an event
heap (arrival, dependency done, first-byte timeout, client patience, fault boundaries) and the
engine's own iteration times; once per step every family is sampled into a ``SeriesStore``.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from prometheus_client.core import Metric

from exporter.collector import GpuCollector
from gateway.admission import AdmissionController, AdmissionLimits, Outcome, RejectReason, Ticket
from gateway.metrics import GatewayMetrics
from simulator.arrivals import MAX_PROMPT_TOKENS, Arrival, ArrivalStream
from simulator.cadvisor import cadvisor_families
from simulator.clock import VirtualClock
from simulator.engine import Seq, SeqState
from simulator.exposition import engine_families
from simulator.fault_kinds import Effect
from simulator.fleet import Fleet
from simulator.kube_state import kube_state_families
from simulator.load_shape import RequestMix, daily_rate
from simulator.node_scrape import SKIP_FAMILIES, FleetBackend, record_scrape
from simulator.scenario import Scenario
from simulator.series import SeriesStore
from simulator.stats import ChildSampler, PendingCount, PendingObservations
from simulator.trace import scenario_arrivals

ROUTE = "/v1/chat/completions"
# Clients give up on a request still queued after this long (counted 499 by the gateway).
CLIENT_PATIENCE_S = 120.0
MAX_TOKENS = 512
_DAY_S = 86400.0
_EDGE_S = 1e-3  # far more than the microsecond datetime rounds a timestamp to


@dataclass(eq=False, slots=True)
class _Request:
    arrival: float
    prompt_tokens: int
    output_tokens: int
    ticket: Ticket | None = None
    started: float | None = None
    seq: Seq | None = None
    seen_tokens: int = 0
    first_at: float | None = None
    last_chunk: float | None = None
    done: bool = False


class NodeHistory:
    """One node's engine, GPUs, dependency and gateway over the whole horizon."""

    def __init__(
        self, sc: Scenario, fleet: Fleet, name: str, store: SeriesStore, step_s: float, wall_origin_s: float,
        recorded: Sequence[Arrival] | None = None,
    ) -> None:
        self.sc, self.fleet, self.name, self.store = sc, fleet, name, store
        self.recorded = recorded
        self.node = fleet.node(name)
        self.engine = self.node.engine
        self.step_s = step_s
        self.wall_origin_s = wall_origin_s
        self.clock = VirtualClock()
        g = sc.gateway
        self.limits = AdmissionLimits(g.max_concurrency, g.max_queue, g.max_queue_wait_s)
        self.ctl = AdmissionController(self.limits, clock=self.clock.now)
        self.gw = GatewayMetrics(sc.service, name, [sc.model], self.ctl)
        base = self.gw.base_labels(sc.model)
        # The gateway series take their increments once per step (see PendingObservations).
        codes = ("200", "429", "499", "502", "504")
        self._code = {code: PendingCount(self.gw.requests, *base, ROUTE, code) for code in codes}
        self._rejected = {r.value: PendingCount(self.gw.rejected, *base, r.value) for r in RejectReason}
        self._aborts = {
            r: PendingCount(self.gw.aborts, *base, r) for r in ("first_byte_timeout", "upstream_error")
        }
        self._duration = PendingObservations(self.gw.duration, *base, ROUTE)
        self._ttft = PendingObservations(self.gw.ttft, *base)
        self._itl = PendingObservations(self.gw.inter_token, *base)
        self._tokens = PendingCount(self.gw.output_tokens, *base)
        self._upstream = PendingObservations(self.gw.upstream_duration, *base)
        self._wait = PendingObservations(self.gw.queue_wait, *base)
        self._enqueue = PendingObservations(self.gw.queue_length_at_enqueue, *base)
        self.gw_sampler = ChildSampler(
            self.gw.registry,
            [
                *self._code.values(), *self._rejected.values(), *self._aborts.values(), self._duration,
                self._ttft, self._itl, self._tokens, self._upstream, self._wait, self._enqueue,
            ],
        )
        self.stock = sc.telemetry == "stock"
        self.backend = FleetBackend(fleet, name, wall_origin_s)
        self.exporter = GpuCollector(self.backend, name, naming="dcgm-exporter" if self.stock else "oximeter")
        self.arrivals = ArrivalStream(sc.seed, name, RequestMix(model=sc.model))
        self.heap: list[tuple[float, int, str, _Request | None]] = []
        self._n = 0
        self.by_seq: dict[int, _Request] = {}
        self.by_ticket: dict[Ticket, _Request] = {}
        self._ingress_credit = 0.0
        self._day = (math.inf, -math.inf, False)  # the day _weekend looked up last: (from, until, weekend)
        self._last_work = 0.0
        self.faults = [f for f in fleet.faults.all() if f.node == name]
        for fault in self.faults:
            self._push(max(0.0, fault.start), "boundary", None)
            if math.isfinite(fault.end):
                self._push(fault.end, "boundary", None)

    # -- events ---------------------------------------------------------------------------
    def _push(self, t: float, kind: str, req: _Request | None) -> None:
        self._n += 1
        heapq.heappush(self.heap, (t, self._n, kind, req))

    def _rate(self, t: float) -> float:
        wall = self.wall_origin_s + t
        rate = daily_rate(wall % _DAY_S, _DAY_S, self.sc.base_rps, shaped=self.sc.daily_shape)
        if self._weekend(wall):
            rate *= self.sc.weekend_factor
        spike = self.fleet.faults.strongest(t, self.name, effect=Effect.TRAFFIC)
        return rate * (spike.strength if spike is not None else 1.0)

    def _weekend(self, wall: float) -> bool:
        """Whether ``wall`` (epoch seconds) falls on a Saturday or Sunday (UTC), looked up once per
        day: only within a millisecond of midnight can datetime's rounding to microseconds move a
        time to the next day, so those few ask datetime themselves."""
        lo, hi, weekend = self._day
        if lo <= wall < hi:
            return weekend
        start = math.floor(wall / _DAY_S) * _DAY_S
        if start + _EDGE_S <= wall < start + _DAY_S - _EDGE_S:
            weekend = datetime.fromtimestamp(start + _DAY_S / 2, UTC).weekday() >= 5
            self._day = (start + _EDGE_S, start + _DAY_S - _EDGE_S, weekend)
            return weekend
        return datetime.fromtimestamp(wall, UTC).weekday() >= 5

    def _drawn(self) -> Iterator[tuple[float, int, int]]:
        """Poisson arrivals at the scenario's rate, each with its drawn lengths (see arrivals.py)."""
        t = self.arrivals.gap_s(self._rate(0.0))
        while True:
            prompt, output = self.arrivals.lengths()
            yield t, prompt, output
            t += self.arrivals.gap_s(self._rate(t))

    def _replayed(self, horizon_s: float) -> Iterator[tuple[float, int, int]]:
        """This node's share of the scenario's trace; a traffic spike of strength s sends each
        arrival s times (the fraction by chance), the copies spread over the gap to the next one."""
        index = list(self.fleet.nodes).index(self.name)
        at, prompt, output = scenario_arrivals(self.sc, self.wall_origin_s, horizon_s, index,
                                               MAX_PROMPT_TOKENS, MAX_TOKENS)
        rng = random.Random(f"{self.sc.seed}/{self.name}/spike")
        times = at.tolist()
        for i, t in enumerate(times):
            spike = self.fleet.faults.strongest(t, self.name, effect=Effect.TRAFFIC)
            copies = 1
            if spike is not None:
                copies = int(spike.strength) + (rng.random() < spike.strength % 1.0)
            gap = (times[i + 1] if i + 1 < len(times) else horizon_s) - t
            for c in range(copies):
                yield t + gap * c / copies, int(prompt[i]), int(output[i])
        yield math.inf, 0, 0

    def _given(self, recorded: Sequence[Arrival]) -> Iterator[tuple[float, int, int]]:
        """Exactly these requests, e.g. the ones a live run actually sent and when."""
        for a in sorted(recorded, key=lambda a: a.at_s):
            yield a.at_s, a.prompt_tokens, a.output_tokens
        yield math.inf, 0, 0

    def run(self, steps: int) -> None:
        """Simulate ``steps`` steps, sampling at the end of each."""
        engine, heap, clock = self.engine, self.heap, self.clock
        if self.recorded is not None:
            arrivals = self._given(self.recorded)
        elif self.sc.trace is None:
            arrivals = self._drawn()
        else:
            arrivals = self._replayed(steps * self.step_s)
        next_arrival, *lengths = next(arrivals)
        now = clock.now()  # only this loop sets the clock
        for i in range(steps):
            t_sample = (i + 1) * self.step_s
            while True:
                # The earliest of: the sample, the next arrival, the next event, the engine's wake.
                t = t_sample
                if next_arrival < t:
                    t = next_arrival
                if heap and heap[0][0] < t:
                    t = heap[0][0]
                wake = engine.next_wake
                if wake is not None and wake < t:
                    t = wake
                if t > now:
                    clock.set(t)
                    now = clock.now()
                t = now
                # An engine busy past t has nothing to do at t (advance would return at once).
                if wake is None or wake <= t:
                    self._pump(t)
                events = bool(heap) and heap[0][0] <= t
                while heap and heap[0][0] <= t:
                    _t, _n, kind, req = heapq.heappop(heap)
                    self._event(kind, req, t)
                if next_arrival <= t:
                    self._arrive(t, *lengths)
                    next_arrival, *lengths = next(arrivals)
                # Only events reach the engine (submit, abort, restart); an arrival waits for its
                # submit event, so without events the engine is as the first pump left it.
                if events:
                    wake = engine.next_wake
                    if wake is None or wake <= t:
                        self._pump(t)
                if t >= t_sample:
                    break
            self._sample(i, t_sample)

    def _pump(self, t: float) -> None:
        # One advance leaves the engine waiting for a later time (or stalled); answering clients
        # never reaches the engine, so advancing again would change nothing.
        by_seq = self.by_seq
        for seq in self.engine.advance(t):
            req = by_seq.get(seq.id)
            if req is None or req.done:
                continue
            new = seq.generated - req.seen_tokens
            if new > 0:
                if req.first_at is None:
                    req.first_at = seq.first_token_at if seq.first_token_at is not None else t
                    self._ttft.observe(req.first_at - req.arrival)
                    if req.ticket is not None:
                        self.ctl.first_byte(req.ticket)
                elif req.last_chunk is not None:
                    self._itl.observe(t - req.last_chunk)
                req.last_chunk = t
                req.seen_tokens = seq.generated
                self._tokens.inc(new)
            if seq.state is SeqState.FINISHED:
                req.done = True
                self._code["200"].inc()
                self._duration.observe(t - req.arrival)
                assert req.started is not None
                self._upstream.observe(t - req.started)
                self._release(req, t, observe=True)

    def _event(self, kind: str, req: _Request | None, t: float) -> None:
        if kind == "boundary":
            cut = self.fleet.faults.strongest(t, self.name, effect=Effect.ADMISSION)
            limits = (
                self.limits
                if cut is None
                else replace(self.limits, max_concurrency=max(1, int(cut.strength)))
            )
            self.ctl.limits = limits
            self._dropped(self.fleet.apply_restarts(t, only=self.name), t)
            return
        assert req is not None
        if kind == "submit" and not req.done:
            req.seq = self.engine.submit(req.prompt_tokens, MAX_TOKENS, t, req.output_tokens)
            self.by_seq[req.seq.id] = req
        elif kind == "first_byte_timeout" and not req.done and req.first_at is None:
            if req.seq is not None:
                self.engine.abort(req.seq, t)
            self._fail(req, t, "504", "first_byte_timeout")
        elif kind == "patience" and not req.done and req.ticket is not None and self.ctl.cancel(req.ticket):
            req.done = True
            self._wait.observe(req.ticket.wait_s())  # as the gateway does: an unserved wait is a wait
            self._code["499"].inc()
            self._duration.observe(t - req.arrival)

    def _arrive(self, t: float, prompt_tokens: int, output_tokens: int) -> None:
        req = _Request(t, prompt_tokens, output_tokens)
        if self.stock:  # no gateway: no edge errors, no admission, straight to the engine
            self._start(req, t)
            return
        ingress = self.fleet.faults.strongest(t, self.name, effect=Effect.INGRESS_ERRORS)
        if ingress is not None:
            self._ingress_credit += ingress.strength
            if self._ingress_credit >= 1.0:
                self._ingress_credit -= 1.0
                self._code["504"].inc()
                self._duration.observe(0.05)
                return
        decision = self.ctl.offer()
        if decision.outcome is Outcome.REJECTED:
            assert decision.reason is not None
            self._code["429"].inc()
            self._rejected[decision.reason.value].inc()
            self._duration.observe(0.001)
            return
        assert decision.ticket is not None
        req.ticket = decision.ticket
        self.by_ticket[decision.ticket] = req
        self._enqueue.observe(decision.queue_position)
        if decision.outcome is Outcome.ADMITTED:
            self._start(req, t)
        else:
            self._push(t + CLIENT_PATIENCE_S, "patience", req)

    def _start(self, req: _Request, t: float) -> None:
        req.started = t
        self._wait.observe(t - req.arrival)
        wait_s = self.node.dependency.call(t, self.fleet.faults)
        self._push(t + wait_s, "submit", req)
        if not self.stock:  # the gateway's timeout; a client of the engine itself just waits
            self._push(t + self.sc.gateway.first_byte_timeout_s, "first_byte_timeout", req)

    def _fail(self, req: _Request, t: float, code: str, reason: str) -> None:
        req.done = True
        self._code[code].inc()
        self._aborts[reason].inc()
        self._duration.observe(t - req.arrival)
        self._release(req, t, observe=False)

    def _dropped(self, seqs: list[Seq], t: float) -> None:
        for seq in seqs:
            req = self.by_seq.get(seq.id)
            if req is not None and not req.done:
                self._fail(req, t, "502", "upstream_error")

    def _release(self, req: _Request, t: float, *, observe: bool) -> None:
        if req.seq is not None:
            self.by_seq.pop(req.seq.id, None)
        if req.ticket is None:
            return
        self.by_ticket.pop(req.ticket, None)
        for ticket in self.ctl.release(req.ticket, observe=observe):
            self._start(self.by_ticket[ticket], t)

    # -- sampling -------------------------------------------------------------------------
    def _sample(self, i: int, t: float) -> None:
        self._dropped(self.fleet.apply_restarts(t, only=self.name), t)
        work = self.engine.work_s
        util = (work - self._last_work) / self.step_s
        self._last_work = work
        self.fleet.step_gpus(self.name, t, util, self.wall_origin_s)
        if self.fleet.faults.strongest(t, self.name, effect=Effect.SCRAPE_GAP) is not None:
            return  # nothing scraped: every series of the node has a hole
        engine_up = t >= self.node.down_until
        self.backend.now = t
        jobs: dict[str, list[Metric]] = {
            "vllm": engine_families(self.sc.model, self.engine, self.name) if engine_up else [],
            "dcgm-exporter": list(self.exporter.collect()),
            "kube-state-metrics": list(kube_state_families(self.fleet, t, only=self.name)),
            # The kubelet's cAdvisor endpoint: the engine container's memory while it runs.
            "kubelet": list(cadvisor_families(self.fleet, self.name, t)) if engine_up else [],
        } if self.stock else {
            "vllm": [
                *engine_families(self.sc.model, self.engine, self.name),
                *self.node.dependency.families(),
            ]
            if engine_up
            else [],
            "oximeter-gateway": self.gw_sampler.collect(),
            "oximeter-exporter": [f for f in self.exporter.collect() if f.name not in SKIP_FAMILIES],
        }
        record_scrape(self.store, i, self.name, jobs, engine_up)
