"""Work held while nothing comes out: a load (requests running, requests in flight) counted only
where its progress counters (tokens generated; answers ended and chunks streamed) all stood still
over their window.

An engine that is up but not serving (its scheduler hung, its model wedged in a kernel) keeps its
requests and its health check while its counters stand still; an idle engine holds no requests,
and a busy healthy one, however slow, moves them every step. So the product ``load × (progress ==
0)`` is 0 on a healthy or idle engine and the requests it holds on a stalled one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from analyzer.signals.query import Expr
from analyzer.signals.raw import Labeled, RawStore


def _key(labels: dict[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(labels.items()))


@dataclass(frozen=True)
class Stalled(Expr):
    """``load * ((p1 + p2 + …) == bool 0)``, matched on identical label sets: ``load`` where every
    progress counter is 0, 0 where one is not, absent where any side is."""

    load: Expr
    progress: tuple[Expr, ...]

    @property
    def promql(self) -> str:
        """The load, masked by its progress standing still."""
        moved = " + ".join(p.promql for p in self.progress)
        return f"{self.load.promql} * ({moved} == bool 0)"

    def evaluate(self, store: RawStore) -> Labeled:
        """Element-wise over the label sets every side has."""
        load = self.load.evaluate(store)
        sides = [self._by_key(p.evaluate(store)) for p in self.progress]
        keep = [i for i, lab in enumerate(load.labels) if all(_key(lab) in side for side in sides)]
        if not keep:
            return Labeled(np.zeros((len(store.index), 0), np.float32), ())
        columns = [np.stack([side[_key(load.labels[i])] for i in keep], axis=1) for side in sides]
        moved = np.sum(columns, axis=0)
        still = np.where(np.isnan(moved), np.nan, np.where(moved == 0, 1.0, 0.0))
        return Labeled((load.values[:, keep] * still).astype(np.float32), tuple(load.labels[i] for i in keep))

    @staticmethod
    def _by_key(data: Labeled) -> dict[tuple[tuple[str, str], ...], np.ndarray]:
        return {_key(lab): data.values[:, i] for i, lab in enumerate(data.labels)}
