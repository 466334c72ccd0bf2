"""The generated sweep's report (``bench/drill_sweep.py``): per fault kind, the harm bands of the time
to detect, the severe faults one by one, coverage by fault duration, and the closing ``sweep:`` line."""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import numpy as np

from analyzer.signals.slo import SloSettings
from drills.sweep import HOUR_S, KINDS

# A page: what a false incident must not be (a ticket on a fault-free stretch is noise, not a page).
PAGING_SEVERITIES = ("critical",)
# Harm bands of the time to detect: a fault's burn over its first 5 minutes against the burn rates
# of the default objectives, which a replay follows (the fast page's, the slow page's, a ticket's).
_SLOS = SloSettings()
SEVERE_BURN, MODERATE_BURN, TICKET_BURN = _SLOS.page_fast_burn, _SLOS.page_slow_burn, _SLOS.ticket_burn


def _pct(values: Sequence[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else math.nan


def _strengths(values: Sequence[float]) -> str:
    return f"{min(values):g}..{max(values):g}" if values else "-"


def report(results: list[dict[str, Any]], strengths: dict[str, list[float]]) -> list[str]:
    """The per-kind table and the closing line.

    ``n`` counts every generated fault; ``harmless`` the ones that harmed no request and that no
    incident named (not visible at their strength and traffic, see HARMLESS: out of attribution);
    ``right`` is the share of the others attributed right. Coverage is of faults that last
    (a one-off event's incident outlives its nominal span by design).
    """
    lines = [f"{'kind':24} {'n':>4} {'harmless':>8} {'right':>6} {'ttd p50':>8} {'ttd p95':>8} "
             f"{'cov p10':>8} {'msg max':>7}  weakest right (range weak..severe); harmless strengths"]
    by_kind: dict[str, list[tuple[dict[str, Any], float]]] = {}
    for res in results:
        for row, strength in zip(res["rows"], strengths[res["name"]], strict=True):
            by_kind.setdefault(row["rule"], []).append((row, strength))
    for name in sorted(KINDS):
        got = by_kind.get(name, [])
        rows = [r for r, _ in got if r["visible"]]
        right = [r for r in rows if r["right"]]
        ttd = [r["ttd_s"] / 60 for r in right if r["ttd_s"] is not None]
        cov = [100 * r["coverage"] for r in right if r["coverage"] is not None]
        msgs = [r["messages"] for r in right if r["messages"] is not None]
        weak, severe = KINDS[name].strength
        found = [s for r, s in got if r["right"]]
        weakest = (max(found) if weak > severe else min(found)) if found else None
        harmless = [s for r, s in got if not r["visible"]]
        share = f"{100 * len(right) / len(rows):.0f}%" if rows else "-"
        lines.append(f"{name:24} {len(got):>4} {len(harmless):>8} {share:>6} {_pct(ttd, 50):>7.1f}m "
                     f"{_pct(ttd, 95):>7.1f}m {_pct(cov, 10):>7.0f}% {max(msgs, default=0):>7}  "
                     f"{'none' if weakest is None else f'{weakest:g}'} ({weak:g}..{severe:g}); "
                     f"{_strengths(harmless)}")
    rows = [r for res in results for r in res["rows"] if r["visible"]]
    right = [r for r in rows if r["right"]]
    cov = [100 * r["coverage"] for r in right if r["coverage"] is not None]
    per_incident = [m for res in results for m in res["per_incident"]]
    false = [f for res in results for f in res["false"]]
    node_days = sum(res["node_days"] for res in results)
    # A page is false unless the burn on its node pages too (those are not in ``false``).
    paging = [f for f in false if f["severity"] in PAGING_SEVERITIES]
    lines += _severe_table(rows)
    lines.append(_coverage_by_duration(right))
    lines.append("false incidents: " + (", ".join(
        f"{f['rule']}@{f['node']} ({f['severity']}, burn {f['burn']})" for f in false) or "none")
        + f" over {node_days:.1f} node-days")
    breaching = [res for res in results if res.get("fault_free_burn")]
    lines.append("fault-free fleets burning their budget at their own peak: " + (", ".join(
        f"{res['name']} ({res['fault_free_burn']})" for res in breaching) or "none") + "; incidents on such "
        "burns, severity following the burn (not false): " + (", ".join(
            f"{b['rule']}@{b['node']} ({b['severity']}, burn {b['burn']})"
            for res in results for b in res.get("breaches", ())) or "none"))
    lines.append(_ttd_by_harm(rows))
    held = [100 * r["held"] for r in right if r.get("held") is not None]
    fast, slow = _ttd_band(rows, SEVERE_BURN, math.inf), _ttd_band(rows, MODERATE_BURN, SEVERE_BURN)
    lines.append(
        f"sweep: scenarios={len(results)} attribution={100 * len(right) / max(1, len(rows)):.0f}% "
        f"coverage_open_p10={_pct(held, 10):.0f}% ttd_severe_p90={_rank(fast, 90):.0f}s "
        f"ttd_moderate_p90={_rank(slow, 90):.0f}s messages_median={_pct(per_incident, 50):.0f} "
        f"messages_max={max(per_incident, default=0)} "
        f"false_per_node_day={len(false) / max(node_days, 1e-9):.2f} "
        f"paging_false={len(paging)}")
    return lines


def _rank(values: Sequence[float], q: float) -> float:
    """The q-th percentile taken as an observed value (no interpolation, so a miss counted as
    inf stays inf rather than NaN); NaN when empty."""
    return float(np.percentile(values, q, method="higher")) if values else math.nan


def _ttd_band(rows: Sequence[dict[str, Any]], lo: float, hi: float) -> list[float]:
    """Seconds to detect of the faults whose onset burn is in [lo, hi); a fault of that harm that
    was never attributed right counts as never detected (inf), so a miss cannot improve a p90."""
    band = [r for r in rows if r.get("burn") is not None and lo <= r["burn"] < hi]
    return [r["ttd_s"] if r["right"] and r["ttd_s"] is not None else math.inf for r in band]


def _severe_table(rows: Sequence[dict[str, Any]]) -> list[str]:
    """One line per severe fault: where its time to detect came from (onset, the first sample after
    it, the opening, and the evidence the incident opened on)."""
    lines = [f"severe faults (onset burn ≥ {SEVERE_BURN:g}×), slowest first: scenario, truth, burn, onset, "
             "time to detect, the evidence it opened on"]
    for r in sorted((r for r in rows if (r.get("burn") or 0) >= SEVERE_BURN),
                    key=lambda r: -(r["ttd_s"] if r["right"] and r["ttd_s"] is not None else math.inf)):
        ttd = "missed" if not r["right"] or r["ttd_s"] is None else f"{r['ttd_s']:.0f}s"
        onset = "-" if r.get("onset") is None else f"{datetime.fromtimestamp(r['onset'], UTC):%H:%M:%S}"
        lines.append(f"  {r.get('name', '-')} {r['rule']} {r['burn']:.1f}× {onset} {ttd} "
                     f"{r.get('opened_by', '-')}")
    return lines


def _ttd_by_harm(rows: Sequence[dict[str, Any]]) -> str:
    """``time to detect by harm: …``: p50/p90 per band of onset burn, with how many faults."""
    bands = ((SEVERE_BURN, math.inf, f"severe (≥ {SEVERE_BURN:g}×)"),
             (MODERATE_BURN, SEVERE_BURN, f"moderate ({MODERATE_BURN:g}-{SEVERE_BURN:g}×)"),
             (TICKET_BURN, MODERATE_BURN, f"slow ({TICKET_BURN:g}-{MODERATE_BURN:g}×)"),
             (0.0, TICKET_BURN, f"within budget (< {TICKET_BURN:g}×)"))
    parts = []
    for lo, hi, name in bands:
        ttd = _ttd_band(rows, lo, hi)
        parts.append(f"{name} p50 {_rank(ttd, 50):.0f}s p90 {_rank(ttd, 90):.0f}s (n={len(ttd)})")
    return "time to detect by harm (onset burn): " + "; ".join(parts)


# Fault durations the coverage is broken down by (seconds): detection takes minutes, so the share of
# a short fault its incident can cover is bounded by it, and that of a long one is not.
DURATION_BANDS = ((600.0, 1800.0, "10-30 min"), (1800.0, 2 * HOUR_S, "30 min-2 h"),
                  (2 * HOUR_S, math.inf, "2 h and more"))


def _coverage_by_duration(right: Sequence[dict[str, Any]]) -> str:
    """``coverage p10 by fault duration: …; counted from the opening …``: where coverage is lost,
    to detection time on short faults or to resolving while the fault went on."""
    parts = []
    for lo, hi, name in DURATION_BANDS:
        band = [100 * r["coverage"] for r in right if r.get("duration_s") is not None
                and lo <= r["duration_s"] < hi]
        parts.append(f"{name} {_pct(band, 10):.0f}% (n={len(band)})")
    held = [100 * r["held"] for r in right if r.get("held") is not None]
    return (f"coverage p10 by fault duration: {', '.join(parts)}; counted from the opening "
            f"(detection time left out): p10 {_pct(held, 10):.0f}%")
