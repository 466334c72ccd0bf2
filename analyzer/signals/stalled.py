"""Work held while nothing comes out: a load (requests running, requests in flight) counted only
where its progress counter (tokens generated, tokens answered) did not move over its window.

An engine that is up but not serving (its scheduler hung, its model wedged in a kernel) keeps its
requests and its health check while its token counters stand still; an idle engine holds no
requests, and a busy healthy one moves its counters every step. So the product ``load × (progress
== 0)`` is 0 on a healthy or idle engine and the requests it holds on a stalled one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from analyzer.signals.query import Expr
from analyzer.signals.raw import Labeled, RawStore


@dataclass(frozen=True)
class Stalled(Expr):
    """``load * (progress == bool 0)``, matched on identical label sets: ``load`` where ``progress``
    is 0, 0 where it is not, absent where either is."""

    load: Expr
    progress: Expr

    @property
    def promql(self) -> str:
        """The load, masked by its progress standing still."""
        return f"{self.load.promql} * ({self.progress.promql} == bool 0)"

    def evaluate(self, store: RawStore) -> Labeled:
        """Element-wise over the label sets both sides have."""
        load, progress = self.load.evaluate(store), self.progress.evaluate(store)
        where = {tuple(sorted(lab.items())): i for i, lab in enumerate(progress.labels)}
        pairs = [(i, where[key]) for i, lab in enumerate(load.labels)
                 if (key := tuple(sorted(lab.items()))) in where]
        if not pairs:
            return Labeled(np.zeros((len(store.index), 0), np.float32), ())
        il, ip = (list(x) for x in zip(*pairs, strict=True))
        moved = progress.values[:, ip]
        still = np.where(np.isnan(moved), np.nan, (moved == 0).astype(np.float32))
        return Labeled((load.values[:, il] * still).astype(np.float32), tuple(load.labels[i] for i in il))
