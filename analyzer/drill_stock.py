"""Why a drill replayed on stock telemetry could not name its fault, when stock telemetry cannot.

A fault is judgeable on stock telemetry when the signals that name it on Oximeter's own telemetry
have stock inputs. So for a stock drill that missed, the same scenario is replayed on Oximeter's
telemetry (its history is cached) and the root-cause signals of the incidents that named the truth
are looked up in :class:`analyzer.stock_inputs.StockInputs`: each one stock telemetry lacks is
the reason, in the words ``oximeter config check`` uses. A miss whose signals stock telemetry
does have is a real failure.
"""

from __future__ import annotations

from pathlib import Path

from analyzer.settings import AnalyzerSettings
from analyzer.signals import CATALOGUE


def why_stock_cannot_judge(path: Path, cache_dir: Path, step_s: float, interval_s: float,
                           trace: tuple[str, float] | None = None) -> str | None:
    """The missing inputs behind the signals that name ``path``'s faults, or None when none is missing."""
    from analyzer.drill import expected_truths, load_drill_scenario, replay_windows
    from analyzer.replay import truth_matches
    from analyzer.stock_inputs import describe

    sc = load_drill_scenario(path, trace)
    run = replay_windows(sc, cache_dir, step_s, interval_s)
    truths = expected_truths(sc.truth.model_dump(), [a.model_dump() for a in sc.also])
    naming = {str(i["root_cause"]["signal"]) for i in run.incidents
              if any(truth_matches(i, t) for t in truths)}
    missing = [m for m in AnalyzerSettings(inputs="stock").stock_inputs().missing(CATALOGUE)
               if naming & set(m.signals)]
    if not missing:
        return None
    return "; ".join(describe(missing))
