"""The engine model on a virtual clock: exact times, counts and histogram sums."""

from __future__ import annotations

import pytest

from simulator.engine import Conditions, EngineModel, EngineParams, SeqState

# Round numbers so every expected value below is exact arithmetic.
BASE = EngineParams(
    max_num_seqs=4,
    prefill_s_per_token=0.001,
    decode_s_per_token=0.1,
    decode_batch_factor=0.0,
    kv_blocks=100,
    block_tokens=4,
    prefix_hit_rate=0.5,
)


def run_until_idle(engine: EngineModel, t: float = 0.0, limit: int = 10_000) -> float:
    """Advance iteration by iteration until the engine has nothing left; returns the last time."""
    engine.advance(t)
    for _ in range(limit):
        wake = engine.next_wake
        if wake is None:
            return t
        t = wake
        engine.advance(t)
    raise AssertionError("engine did not go idle")


def test_single_request_timing_and_counters() -> None:
    engine = EngineModel(BASE)
    seq = engine.submit(prompt_tokens=10, max_tokens=3, now=0.0)
    end = run_until_idle(engine)
    # Iteration 1: 5 uncached prompt tokens (hit rate 0.5) × 1 ms + one decode of 100 ms.
    assert seq.first_token_at == pytest.approx(0.105)
    assert end == pytest.approx(0.305)
    assert seq.state is SeqState.FINISHED and seq.finish_reason == "length"
    s = engine.stats
    assert (s.prompt_tokens, s.generation_tokens, s.prefix_queries, s.prefix_hits) == (10, 3, 10, 5)
    assert s.success == {"stop": 0, "length": 1, "abort": 0}
    assert s.ttft.count == 1 and s.ttft.total == pytest.approx(0.105)
    assert s.itl.count == 2 and s.itl.total == pytest.approx(0.2)
    assert s.e2e.total == pytest.approx(0.305)
    assert s.queue_time.total == 0.0
    assert engine.used_blocks == 0 and engine.kv_usage == 0.0


def test_natural_stop_before_max_tokens() -> None:
    engine = EngineModel(BASE)
    seq = engine.submit(prompt_tokens=4, max_tokens=10, now=0.0, stop_tokens=2)
    run_until_idle(engine)
    assert (seq.generated, seq.finish_reason) == (2, "stop")


@pytest.mark.parametrize(
    ("factor", "batch", "iteration_s"),
    [
        (0.0, 1, 0.1),
        (0.0, 4, 0.1),
        (0.5, 2, 0.15),
        (0.5, 4, 0.25),
    ],
)
def test_decode_slows_as_batch_grows(factor: float, batch: int, iteration_s: float) -> None:
    params = EngineParams(**{**BASE.__dict__, "decode_batch_factor": factor, "prefill_s_per_token": 0.0})
    engine = EngineModel(params)
    for _ in range(batch):
        engine.submit(prompt_tokens=4, max_tokens=2, now=0.0)
    assert run_until_idle(engine) == pytest.approx(2 * iteration_s)
    assert engine.stats.generation_tokens == 2 * batch


def test_max_num_seqs_queues_the_rest() -> None:
    params = EngineParams(**{**BASE.__dict__, "max_num_seqs": 2, "prefill_s_per_token": 0.0})
    engine = EngineModel(params)
    seqs = [engine.submit(prompt_tokens=4, max_tokens=2, now=0.0) for _ in range(3)]
    engine.advance(0.0)
    assert (len(engine.running), len(engine.waiting)) == (2, 1)
    run_until_idle(engine)
    assert seqs[2].scheduled_at == pytest.approx(0.2)
    assert engine.stats.queue_time.total == pytest.approx(0.2)
    assert seqs[2].finished_at == pytest.approx(0.4)


def test_kv_exhaustion_preempts_latest_and_recovers() -> None:
    # 4 blocks of 4 tokens; two sequences of 4 prompt tokens each need a 2nd block at token 1.
    params = EngineParams(**{**BASE.__dict__, "kv_blocks": 3, "prefill_s_per_token": 0.0})
    engine = EngineModel(params)
    a = engine.submit(prompt_tokens=4, max_tokens=4, now=0.0)
    b = engine.submit(prompt_tokens=4, max_tokens=4, now=0.0)
    engine.advance(0.0)
    # Admission needs ceil(5/4)=2 blocks each: only a fits in 3 blocks.
    assert engine.running == [a] and list(engine.waiting) == [b]
    assert engine.kv_usage == pytest.approx(2 / 3)
    run_until_idle(engine)
    assert a.generated == 4 and b.generated == 4
    assert engine.stats.preemptions == 0

    engine2 = EngineModel(EngineParams(**{**BASE.__dict__, "kv_blocks": 4, "prefill_s_per_token": 0.0}))
    c = engine2.submit(prompt_tokens=7, max_tokens=6, now=0.0)
    d = engine2.submit(prompt_tokens=7, max_tokens=6, now=0.0)
    run_until_idle(engine2)
    # Both start with 2 blocks (8 tokens); at token 2 each needs a 3rd: d is preempted, then resumes.
    assert engine2.stats.preemptions == 1
    assert c.finished_at == pytest.approx(0.6)
    assert d.generated == 6 and d.state is SeqState.FINISHED
    # d's prompt is counted once even though it was prefilled twice.
    assert engine2.stats.prompt_tokens == 14


def test_abort_frees_the_sequence_at_once() -> None:
    engine = EngineModel(BASE)
    seq = engine.submit(prompt_tokens=8, max_tokens=100, now=0.0)
    engine.advance(0.35)
    generated = engine.stats.generation_tokens
    assert len(engine.running) == 1 and engine.used_blocks > 0
    engine.abort(seq, 0.35)
    assert (len(engine.running), engine.used_blocks, engine.stats.aborted) == (0, 0, 1)
    run_until_idle(engine, 0.35)
    # The in-flight iteration ends, but an aborted sequence gets no more tokens.
    assert engine.stats.generation_tokens == generated
    assert engine.stats.success == {"stop": 0, "length": 0, "abort": 1}  # as vLLM counts an abort


@pytest.mark.parametrize(
    ("conditions", "end_s", "hits"),
    [
        (Conditions(), 0.205, 4),
        (Conditions(slowdown=2.0), 0.41, 4),
        (Conditions(prefix_hit_rate=0.0), 0.209, 0),
    ],
)
def test_conditions_change_timing(conditions: Conditions, end_s: float, hits: int) -> None:
    engine = EngineModel(BASE, lambda _now: conditions)
    engine.submit(prompt_tokens=9, max_tokens=2, now=0.0)
    assert run_until_idle(engine) == pytest.approx(end_s)
    assert engine.stats.prefix_hits == hits


def test_stall_makes_no_progress_until_lifted() -> None:
    stalled = {"on": True}
    engine = EngineModel(BASE, lambda _now: Conditions(stalled=stalled["on"]))
    for _ in range(3):
        engine.submit(prompt_tokens=4, max_tokens=1, now=0.0)
    engine.advance(5.0)
    assert (len(engine.waiting), engine.stats.generation_tokens, engine.next_wake) == (3, 0, None)
    stalled["on"] = False
    run_until_idle(engine, 5.0)
    assert engine.stats.generation_tokens == 3
    assert engine.stats.queue_time.total == pytest.approx(15.0)


def test_kv_shrink_preempts_down_to_the_new_pool() -> None:
    fraction = {"kv": 1.0}
    params = EngineParams(**{**BASE.__dict__, "kv_blocks": 10, "prefill_s_per_token": 0.0})
    engine = EngineModel(params, lambda _now: Conditions(kv_fraction=fraction["kv"]))
    a, b, c, d = (engine.submit(prompt_tokens=7, max_tokens=50, now=0.0) for _ in range(4))
    engine.advance(0.0)
    assert engine.used_blocks == 8 and engine.kv_usage == pytest.approx(0.8)
    fraction["kv"] = 0.5
    engine.advance(0.1)
    # Pool 5: d and c are preempted to fit (8 → 4 blocks); a takes the last free block for
    # token 9, so b, needing one too, preempts itself.
    assert engine.pool_blocks == 5
    assert engine.running == [a] and list(engine.waiting) == [b, c, d]
    assert (engine.used_blocks, engine.stats.preemptions) == (3, 3)


def test_coarse_iterations_emit_several_tokens() -> None:
    params = EngineParams(**{**BASE.__dict__, "tokens_per_iteration": 4, "prefill_s_per_token": 0.0})
    engine = EngineModel(params)
    seq = engine.submit(prompt_tokens=4, max_tokens=10, now=0.0)
    assert run_until_idle(engine) == pytest.approx(1.2)  # 3 iterations of 4 × 0.1 s
    assert seq.generated == 10 and engine.stats.generation_tokens == 10
    assert engine.stats.itl.count == 9


@pytest.mark.parametrize(
    ("batch", "work_share"), [(1, 0.15 + 0.85 / 8), (4, 0.15 + 0.85 / 2), (8, 1.0), (16, 1.0)]
)
def test_utilisation_weights_busy_time_by_batch(batch: int, work_share: float) -> None:
    params = EngineParams(**{**BASE.__dict__, "max_num_seqs": 16, "prefill_s_per_token": 0.0})
    engine = EngineModel(params)
    for _ in range(batch):
        engine.submit(prompt_tokens=4, max_tokens=3, now=0.0)
    run_until_idle(engine)
    assert engine.busy_s == pytest.approx(0.3)
    assert engine.work_s == pytest.approx(0.3 * work_share)


def test_coarse_iterations_agree_with_fine_ones() -> None:
    """History runs k tokens per iteration; on the same arrivals its latencies match k=1 closely."""
    import random

    def run(k: int) -> EngineModel:
        params = EngineParams(
            max_num_seqs=16,
            prefill_s_per_token=0.0001,
            decode_s_per_token=0.02,
            decode_batch_factor=0.02,
            tokens_per_iteration=k,
        )
        engine = EngineModel(params)
        rng = random.Random(7)
        t = 0.0
        for _ in range(400):
            t += rng.expovariate(2.0)
            engine.advance(t)
            engine.submit(rng.randint(50, 400), rng.randint(10, 200), t)
        run_until_idle(engine, t)
        return engine

    fine, coarse = run(1), run(8)
    assert coarse.stats.generation_tokens == fine.stats.generation_tokens
    for name in ("ttft", "e2e", "queue_time", "itl"):
        f, c = getattr(fine.stats, name), getattr(coarse.stats, name)
        assert c.count == f.count or name == "itl"
        # Within 10 %, or 5 ms for waits that are a few milliseconds either way.
        assert c.total / c.count == pytest.approx(f.total / f.count, rel=0.1, abs=0.005), name
    assert coarse.work_s == pytest.approx(fine.work_s, rel=0.1)
