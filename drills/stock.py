"""Why a drill replayed on stock telemetry could not name its fault, when stock telemetry cannot.

A fault that acts in Oximeter's gateway (``FaultKind.gateway``) does not exist on a stock fleet,
which runs no gateway. Otherwise a fault is judgeable on stock telemetry when the signals that
name it on Oximeter's own telemetry have stock inputs. So for a stock drill that missed, the same
scenario is replayed on Oximeter's telemetry (by :mod:`drills.replay`, its history cached) and
the root-cause signals of the incidents that named the truth are looked up in
:class:`analyzer.signals.stock_inputs.StockInputs`: each one stock telemetry lacks is the reason, in the
words ``oximeter config check`` uses. A miss with neither reason is a real failure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from analyzer.service.settings import AnalyzerSettings
from analyzer.signals.catalogue import CATALOGUE


def why_stock_cannot_judge(sc: Any, incidents: Sequence[Mapping[str, Any]]) -> str | None:
    """The gateway faults of scenario ``sc`` and the missing inputs behind the signals that name its
    faults in ``incidents`` (its replay on Oximeter's telemetry, the API's JSON shape), or None when
    there are none."""
    from analyzer.signals.stock_inputs import describe
    from drills.score import expected_truths, truth_matches
    from simulator.faults import FAULT_KINDS

    reasons = [f"{kind}: a fault in Oximeter's gateway, which a stock fleet does not run"
               for kind in sorted({f.kind for f in sc.faults}) if FAULT_KINDS[kind].gateway]
    truths = expected_truths(sc.truth.model_dump(), [a.model_dump() for a in sc.also])
    naming = {str(i["root_cause"]["signal"]) for i in incidents
              if any(truth_matches(i, t) for t in truths)}
    missing = [m for m in AnalyzerSettings(inputs="stock").stock_inputs().missing(CATALOGUE)
               if naming & set(m.signals)]
    reasons += describe(missing)
    return "; ".join(reasons) or None
