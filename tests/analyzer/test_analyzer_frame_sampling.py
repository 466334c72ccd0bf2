"""The frame source's sampling (``FrameSource.fetch``) reads positions in arrays prepared once per
recorded frame; it must answer exactly as the plain pandas reading of a PromQL range query over
the recorded frame does: the window after the first step's lookback, each series forward-filled
for the lookback in native steps, the grid taking the latest row within the lookback."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from analyzer.signals import query as q
from analyzer.signals.frame import SeriesFrame
from analyzer.signals.sources.frames import FrameSource
from analyzer.signals.spec import SignalSpec
from tests.script_module import load_script

# The plain pandas reading the fetch is held to (also the same-run reference of its bench).
pandas_sampling = load_script("bench/replay_loop.py").pandas_sampling

T0 = datetime(2026, 3, 1, tzinfo=UTC)
SPEC = SignalSpec.of(name="s", layer="engine", kind="gauge", entity_labels=("node",), expr=q.select("s"))


@st.composite
def recorded(draw: st.DrawFn) -> pd.DataFrame:
    """A recorded frame: a regular or irregular time index, columns with gaps of any length."""
    rows = draw(st.integers(1, 60))
    if draw(st.booleans()):
        native_s = draw(st.sampled_from([10.0, 15.0, 60.0, 90.0]))
        offsets = np.arange(rows) * native_s
    else:
        offsets = np.cumsum(draw(st.lists(st.sampled_from([5.0, 15.0, 30.0, 400.0]),
                                          min_size=rows, max_size=rows)))
    index = pd.DatetimeIndex([T0 + timedelta(seconds=float(o)) for o in offsets])
    columns = draw(st.integers(1, 4))
    cells = draw(st.lists(st.one_of(st.none(), st.floats(-5, 5, width=32)),
                          min_size=rows * columns, max_size=rows * columns))
    data = np.array([np.nan if c is None else c for c in cells], dtype=np.float64).reshape(rows, columns)
    return pd.DataFrame(data, index=index, columns=[f"node=n{i}" for i in range(columns)])


@settings(max_examples=300, deadline=None)
@given(frame=recorded(), start_s=st.integers(-600, 4000), span_s=st.integers(0, 3000),
       step_s=st.sampled_from([15.0, 30.0, 60.0]))
def test_fetch_samples_as_the_whole_frame_pandas_reading(frame: pd.DataFrame, start_s: int, span_s: int,
                                                         step_s: float) -> None:
    source = FrameSource({SPEC.name: SeriesFrame(frame, {})})
    start = T0 + timedelta(seconds=start_s)
    end = start + timedelta(seconds=span_s)
    got = source.fetch(SPEC, start, end, step_s).values
    want = pandas_sampling(frame, start, end, step_s)
    assert list(got.columns) == list(want.columns)
    assert got.index.equals(want.index)
    np.testing.assert_array_equal(got.to_numpy(), want.to_numpy())
