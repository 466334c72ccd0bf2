"""The engine model: continuous batching, a KV block pool with preemption, a prefix cache.

Pure and steppable: ``advance(now)`` runs every iteration that ends by ``now`` and starts the
next one. No I/O, no asyncio and no randomness, so a virtual clock gives exact, repeatable numbers
(the history generator) and a real clock gives a live engine (the HTTP server).
Time model per iteration: newly admitted sequences prefill their uncached prompt tokens, then
every running sequence emits ``tokens_per_iteration`` tokens; decode time grows with the batch.
"""

from __future__ import annotations

import itertools
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum

from simulator.stats import ITL_BUCKETS, REQUEST_LATENCY_BUCKETS, TTFT_BUCKETS, Histogram

FINISH_REASONS = ("stop", "length", "abort")
# SM activity of a decode iteration with an almost empty batch, relative to a saturating one; decode
# is memory-bound, so SMs saturate once the batch reaches about half of max_num_seqs.
OCCUPANCY_FLOOR = 0.15
SATURATING_BATCH_SHARE = 0.5


@dataclass(frozen=True)
class EngineParams:
    """Timing and capacity of one engine (one vLLM replica on one node)."""

    max_num_seqs: int = 16
    prefill_s_per_token: float = 0.0001
    decode_s_per_token: float = 0.02
    # Each extra running sequence adds this fraction to an iteration's decode time.
    decode_batch_factor: float = 0.02
    kv_blocks: int = 1024
    block_tokens: int = 16
    prefix_hit_rate: float = 0.5
    # History runs coarser iterations (several tokens each) to simulate days in seconds.
    tokens_per_iteration: int = 1

    def __post_init__(self) -> None:
        if min(self.max_num_seqs, self.kv_blocks, self.block_tokens, self.tokens_per_iteration) < 1:
            raise ValueError("max_num_seqs, kv_blocks, block_tokens and tokens_per_iteration must be >= 1")
        if min(self.prefill_s_per_token, self.decode_s_per_token, self.decode_batch_factor) < 0:
            raise ValueError("timings must be >= 0")
        if not 0 <= self.prefix_hit_rate <= 1:
            raise ValueError("prefix_hit_rate must be in [0, 1]")


@dataclass(frozen=True)
class Conditions:
    """What faults and GPUs impose on the engine when an iteration starts."""

    slowdown: float = 1.0
    stalled: bool = False
    kv_fraction: float = 1.0
    prefix_hit_rate: float | None = None


NORMAL = Conditions()


class SeqState(Enum):
    """Where a sequence is in its life."""

    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"
    ABORTED = "aborted"


@dataclass(eq=False, slots=True)
class Seq:
    """One request inside the engine."""

    id: int
    prompt_tokens: int
    target_tokens: int
    finish_reason_at_target: str
    arrival: float
    state: SeqState = SeqState.WAITING
    generated: int = 0
    blocks: int = 0
    cached_tokens: int = 0
    scheduled_at: float | None = None
    first_token_at: float | None = None
    last_token_at: float | None = None
    finished_at: float | None = None
    finish_reason: str | None = None

    @property
    def done(self) -> bool:
        """Finished or aborted: no more tokens will come."""
        return self.state in (SeqState.FINISHED, SeqState.ABORTED)


@dataclass
class EngineStats:
    """Counters and histograms, exactly what vLLM's ``/metrics`` exposes (reset on restart)."""

    prompt_tokens: int = 0
    generation_tokens: int = 0
    preemptions: int = 0
    prefix_queries: int = 0
    prefix_hits: int = 0
    aborted: int = 0
    success: dict[str, int] = field(default_factory=lambda: dict.fromkeys(FINISH_REASONS, 0))
    ttft: Histogram = field(default_factory=lambda: Histogram(TTFT_BUCKETS))
    itl: Histogram = field(default_factory=lambda: Histogram(ITL_BUCKETS))
    e2e: Histogram = field(default_factory=lambda: Histogram(REQUEST_LATENCY_BUCKETS))
    queue_time: Histogram = field(default_factory=lambda: Histogram(REQUEST_LATENCY_BUCKETS))


class EngineModel:
    """One engine's scheduler and timing; drive it with ``submit``, ``abort`` and ``advance``."""

    def __init__(self, params: EngineParams, conditions: Callable[[float], Conditions] | None = None) -> None:
        self.params = params
        self._conditions = conditions or (lambda _now: NORMAL)
        self._ids = itertools.count(1)
        self.waiting: deque[Seq] = deque()
        self.running: list[Seq] = []
        self.used_blocks = 0
        self.pool_blocks = params.kv_blocks
        self.stats = EngineStats()
        self.busy_s = 0.0  # total time iterations ran
        # Busy time weighted by batch occupancy: GPU utilisation as SM activity (DCGM's view), so
        # a batch of one on an otherwise idle engine reads low, as on a real GPU.
        self.work_s = 0.0
        self._iter_start = 0.0
        self._iter_prefill_s = 0.0
        self._iter_token_s = 0.0
        self._iter_work_share = 0.0
        self._iter_end: float | None = None
        self._iter_tokens: list[tuple[Seq, int]] = []
        # The pool size of the last Conditions seen (conditions providers return the same object
        # while nothing changes).
        self._pool_cond: Conditions | None = None
        self._pool_for_cond = params.kv_blocks
        self._timing_cond: Conditions | None = None
        self._timings: dict[tuple[int, int], tuple[float, float, float, float]] = {}

    # -- requests -------------------------------------------------------------------------
    def submit(self, prompt_tokens: int, max_tokens: int, now: float, stop_tokens: int | None = None) -> Seq:
        """Queue a request that stops after ``stop_tokens`` (natural end) or ``max_tokens``."""
        target = max(1, max_tokens if stop_tokens is None else min(max_tokens, stop_tokens))
        reason = "length" if stop_tokens is None or stop_tokens >= max_tokens else "stop"
        seq = Seq(next(self._ids), max(1, prompt_tokens), target, reason, now)
        self.waiting.append(seq)
        self._split(now)
        return seq

    def abort(self, seq: Seq, now: float) -> None:
        """The client went away: free the sequence at once (vLLM aborts on disconnect)."""
        if seq.done:
            return
        if seq.state is SeqState.RUNNING:
            self.running.remove(seq)
            self._free(seq)
        else:
            self.waiting.remove(seq)
        seq.state = SeqState.ABORTED
        seq.finished_at = now
        seq.finish_reason = "abort"
        self.stats.aborted += 1
        self.stats.success["abort"] += 1  # vLLM counts an aborted request under finished_reason="abort"

    def abort_all(self, now: float) -> list[Seq]:
        """Drop every sequence (engine restart); returns them so callers can fail their clients."""
        dropped = [*self.running, *self.waiting]
        for seq in dropped:
            self.abort(seq, now)
        self._iter_end = None
        self._iter_tokens = []
        return dropped

    def reset_stats(self) -> None:
        """A restarted process starts its counters from zero."""
        self.stats = EngineStats()

    # -- time -----------------------------------------------------------------------------
    @property
    def next_wake(self) -> float | None:
        """When the current iteration ends; None while idle or stalled."""
        return self._iter_end

    @property
    def kv_usage(self) -> float:
        """Fraction of the (possibly shrunk) KV pool in use, 0-1."""
        return min(1.0, self.used_blocks / self.pool_blocks) if self.pool_blocks else 1.0

    def advance(self, now: float) -> list[Seq]:
        """Run every iteration ending by ``now``; returns the sequences that got tokens or ended."""
        touched: list[Seq] = []
        start = now
        while True:
            end = self._iter_end
            if end is not None:
                if end > now:
                    break
                start = end
                self._complete(start, touched)
                self._iter_end = None
            # An empty engine has nothing to start (the history pumps it hundreds of thousands of
            # times); skipping _start there changes nothing, as no blocks are in use.
            if not (self.waiting or self.running) or not self._start(start):
                break
        return touched

    # -- internals ------------------------------------------------------------------------
    def _blocks_for(self, tokens: int) -> int:
        return math.ceil(tokens / self.params.block_tokens)

    def _free(self, seq: Seq) -> None:
        self.used_blocks -= seq.blocks
        seq.blocks = 0

    def _preempt(self, seq: Seq) -> None:
        # vLLM v1 recompute preemption: blocks freed, the sequence re-queued at the front.
        self.running.remove(seq)
        self._free(seq)
        seq.state = SeqState.WAITING
        self.waiting.appendleft(seq)
        self.stats.preemptions += 1

    def _start(self, t: float) -> bool:
        cond = self._conditions(t)
        p = self.params
        if cond is not self._pool_cond:
            self._pool_cond = cond
            self._pool_for_cond = max(1, int(p.kv_blocks * cond.kv_fraction))
        self.pool_blocks = self._pool_for_cond
        while self.used_blocks > self.pool_blocks and self.running:
            self._preempt(self.running[-1])
        if cond.stalled:
            return False
        k = p.tokens_per_iteration
        prefill_tokens = 0
        hit_rate = p.prefix_hit_rate if cond.prefix_hit_rate is None else cond.prefix_hit_rate
        while self.waiting and len(self.running) < p.max_num_seqs:
            seq = self.waiting[0]
            first_tokens = min(k, seq.target_tokens - seq.generated)
            need = self._blocks_for(seq.prompt_tokens + seq.generated + first_tokens)
            # A prompt larger than the whole (shrunk) pool still runs alone, over-committed,
            # rather than blocking the queue forever.
            if self.used_blocks + need > self.pool_blocks and self.running:
                break
            self.waiting.popleft()
            seq.blocks = need
            self.used_blocks += need
            seq.state = SeqState.RUNNING
            self.running.append(seq)
            hits = int(seq.prompt_tokens * hit_rate)
            self.stats.prefix_queries += seq.prompt_tokens
            self.stats.prefix_hits += hits
            if seq.scheduled_at is None:
                seq.scheduled_at = t
                seq.cached_tokens = hits
                self.stats.queue_time.observe(t - seq.arrival)
                self.stats.prompt_tokens += seq.prompt_tokens
            prefill_tokens += seq.prompt_tokens + seq.generated - hits
        batch: list[tuple[Seq, int]] = []
        block_tokens = p.block_tokens
        pool = self.pool_blocks
        running_state = SeqState.RUNNING
        for seq in list(self.running):
            if seq.state is not running_state:
                continue  # preempted below by an earlier sequence's growth
            generated = seq.generated
            n = seq.target_tokens - generated
            if n > k:
                n = k
            # _blocks_for in integers (the hottest line of a history run).
            need = (seq.prompt_tokens + generated + n + block_tokens - 1) // block_tokens - seq.blocks
            if need > pool - self.used_blocks:
                while need > self.pool_blocks - self.used_blocks and len(self.running) > 1:
                    victim = self.running[-1]
                    self._preempt(victim)
                    if victim is seq:
                        break
                if seq.state is not running_state:
                    continue
            seq.blocks += need
            self.used_blocks += need
            batch.append((seq, n))
        if not batch:
            return False
        # Decode-only iterations repeat a few shapes (batch size under the same conditions), so
        # their timing is computed once per shape; the numbers are the same either way.
        if cond is not self._timing_cond:
            self._timing_cond = cond
            self._timings.clear()
        shape = (len(batch), prefill_tokens)
        timing = self._timings.get(shape) if prefill_tokens == 0 else None
        if timing is None:
            timing = self._timing(len(batch), prefill_tokens, cond)
            if prefill_tokens == 0:
                self._timings[shape] = timing
        duration, self._iter_prefill_s, self._iter_token_s, self._iter_work_share = timing
        self._iter_start = t
        self._iter_end = t + duration
        self._iter_tokens = batch
        self.busy_s += duration
        self.work_s += duration * self._iter_work_share
        return True

    def _timing(self, batch: int, prefill_tokens: int, cond: Conditions) -> tuple[float, float, float, float]:
        """(duration, prefill seconds, seconds per token, work share) of one iteration."""
        p = self.params
        k = p.tokens_per_iteration
        decode_s = k * p.decode_s_per_token * (1 + p.decode_batch_factor * (batch - 1))
        duration = (prefill_tokens * p.prefill_s_per_token + decode_s) * cond.slowdown
        prefill_s = prefill_tokens * p.prefill_s_per_token * cond.slowdown
        token_s = decode_s / k * cond.slowdown
        occupancy = min(1.0, batch / max(1.0, p.max_num_seqs * SATURATING_BATCH_SHARE))
        return duration, prefill_s, token_s, OCCUPANCY_FLOOR + (1 - OCCUPANCY_FLOOR) * occupancy

    def _split(self, now: float) -> None:
        """End a coarse iteration at the first token boundary after ``now``.

        A new request must not wait for all k tokens of the iteration in flight: vLLM would
        schedule it at the next step. Cutting the iteration there keeps TTFT and queue time as
        fine-grained as k=1 while steady decoding stays coarse (and cheap).
        """
        end = self._iter_end
        if end is None or self.params.tokens_per_iteration == 1 or self._iter_token_s <= 0:
            return
        tokens_done = math.ceil((now - self._iter_start - self._iter_prefill_s) / self._iter_token_s)
        keep = max(1, tokens_done)
        new_end = self._iter_start + self._iter_prefill_s + keep * self._iter_token_s
        if new_end >= end:
            return
        self._iter_tokens = [(seq, min(n, keep)) for seq, n in self._iter_tokens]
        self.busy_s -= end - new_end
        self.work_s -= (end - new_end) * self._iter_work_share
        self._iter_end = new_end

    def _complete(self, t: float, touched: list[Seq]) -> None:
        k = self.params.tokens_per_iteration
        stats = self.stats
        running_state = SeqState.RUNNING
        tokens = 0
        for seq, n in self._iter_tokens:
            if seq.state is not running_state:
                continue  # aborted during the iteration
            if seq.first_token_at is None:
                # With coarse iterations (history) the first token is due after the prefill and
                # one token's decode, not at the end of all k tokens.
                first = t if k == 1 else min(t, self._iter_start + self._iter_prefill_s + self._iter_token_s)
                seq.first_token_at = first
                stats.ttft.observe(first - seq.arrival)
                if n > 1:
                    stats.itl.observe((t - first) / (n - 1), n - 1)
            else:
                assert seq.last_token_at is not None
                stats.itl.observe((t - seq.last_token_at) / n, n)
            seq.generated += n
            seq.last_token_at = t
            tokens += n
            if seq.generated >= seq.target_tokens:
                self._finish(seq, t)
            touched.append(seq)
        stats.generation_tokens += tokens
        self._iter_tokens = []

    def _finish(self, seq: Seq, t: float) -> None:
        self.running.remove(seq)
        self._free(seq)
        seq.state = SeqState.FINISHED
        seq.finished_at = t
        seq.finish_reason = seq.finish_reason_at_target
        self.stats.success[seq.finish_reason] += 1
        self.stats.e2e.observe(t - seq.arrival)
