"""Persistence: the vectorised latch equals a plain state machine, is causal, and its episodes
keep their promises (k of n at detection, quiet clear_n before clearing, cooldown between)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from analyzer.detection.persistence import Persistence

flags_arrays = hnp.arrays(np.bool_, st.tuples(st.integers(1, 60), st.integers(1, 3)))


@st.composite
def policies(draw: st.DrawFn) -> Persistence:
    n = draw(st.integers(1, 6))
    return Persistence(k=draw(st.integers(1, n)), n=n, clear_n=draw(st.integers(1, 5)),
                       cooldown=draw(st.integers(0, 6)))


def reference_active(p: Persistence, flags: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """The obvious sequential state machine, one sample and one series at a time."""
    rows, cols = flags.shape
    out = np.zeros_like(flags)
    for c in range(cols):
        state = False
        for t in range(rows):
            opened = flags[max(0, t - p.n + 1): t + 1, c].sum() >= p.k
            kept = (flags | keep)[max(0, t - p.clear_n + 1): t + 1, c].any()
            state = opened or (state and kept)
            out[t, c] = state
    return out


@settings(max_examples=300, deadline=None)
@given(p=policies(), flags=flags_arrays, seed=st.integers(0, 2**16))
def test_latch_equals_the_state_machine(p: Persistence, flags: np.ndarray, seed: int) -> None:
    keep = np.random.default_rng(seed).random(flags.shape) < 0.3
    np.testing.assert_array_equal(p.active(flags, keep), reference_active(p, flags, keep))


@settings(max_examples=200, deadline=None)
@given(p=policies(), flags=flags_arrays)
def test_causal_on_every_prefix(p: Persistence, flags: np.ndarray) -> None:
    full = p.active(flags)
    for end in range(1, flags.shape[0] + 1):
        np.testing.assert_array_equal(p.active(flags[:end]), full[:end])
    detected = {(e.column, e.onset, e.detected) for e in p.episodes(flags)}
    for end in range(1, flags.shape[0] + 1):
        early = {(e.column, e.onset, e.detected) for e in p.episodes(flags[:end])}
        assert early == {d for d in detected if d[2] < end}


@settings(max_examples=300, deadline=None)
@given(p=policies(), flags=flags_arrays)
def test_episodes_keep_their_promises(p: Persistence, flags: np.ndarray) -> None:
    episodes = p.episodes(flags)
    for ep in episodes:
        col = flags[:, ep.column]
        assert col[max(0, ep.detected - p.n + 1): ep.detected + 1].sum() >= p.k
        assert col[ep.onset] and ep.onset <= ep.detected
        if ep.end is not None:
            assert not col[max(0, ep.end - p.clear_n + 1): ep.end + 1].any()
    for prev, nxt in itertools.pairwise(episodes):
        if prev.column == nxt.column:
            assert prev.end is not None and nxt.onset - prev.end >= p.cooldown


@given(flags=flags_arrays)
def test_never_flagged_never_active(flags: np.ndarray) -> None:
    assert Persistence().episodes(np.zeros_like(flags)) == []


def test_hysteresis_holds_while_keep_and_clears_after_clear_n_quiet() -> None:
    flags = np.array([0, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0], bool)
    keep = np.array([0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0], bool)
    p = Persistence(k=3, n=3, clear_n=3)
    assert p.active(flags, keep).astype(int).tolist() == [0, 0, 0, 1, 1, 1, 1, 1, 0, 0, 0, 0]
    [ep] = p.episodes(flags, keep)
    assert (ep.onset, ep.detected, ep.end) == (1, 3, 8)


def test_cooldown_merges_a_quick_recurrence() -> None:
    flags = np.array([1, 1, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 1, 1, 0], bool)
    merged = Persistence(k=2, n=2, clear_n=1, cooldown=4).episodes(flags)
    assert [(e.onset, e.detected, e.end) for e in merged] == [(0, 1, 6), (12, 13, 14)]
    split = Persistence(k=2, n=2, clear_n=1, cooldown=0).episodes(flags)
    assert [(e.onset, e.detected, e.end) for e in split] == [(0, 1, 2), (4, 5, 6), (12, 13, 14)]


@pytest.mark.parametrize(("window_s", "step_s", "expected"), [
    (300, 15, (15, 20, 20)),
    (300, 60, (4, 5, 5)),
    (60, 60, (3, 3, 3)),
    (300, 3600, (3, 3, 3)),
])
def test_for_step(window_s: float, step_s: float, expected: tuple[int, int, int]) -> None:
    p = Persistence.for_step(window_s, step_s)
    assert (p.k, p.n, p.clear_n) == expected


def test_invalid_policies_fail_fast() -> None:
    with pytest.raises(ValueError, match="k <= n"):
        Persistence(k=5, n=3)
