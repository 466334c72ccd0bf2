"""Claims in the shared store (oximeter/claims.py), on both stores: one holder at a time, the
holder may renew, another takes the claim once it has expired."""

from __future__ import annotations

from pg_server import StoreSpace

from oximeter.claims import Claims
from oximeter.store import connect

# (who asks, at which second) -> whether they hold the claim after; each claim lasts 10 s.
STEPS = [(("a", 100.0), True), (("b", 101.0), False), (("a", 105.0), True),  # renewed to 115
         (("b", 114.0), False), (("b", 115.0), True), (("a", 116.0), False)]


def test_one_holder_at_a_time_until_the_claim_expires(stores: StoreSpace) -> None:
    path = stores / "claims.db"
    conns = {name: connect(path) for name in ("a", "b")}
    try:
        claims = {name: Claims(conn, f"host:{name}") for name, conn in conns.items()}
        got = [claims[who].take("digest:2025-11-30", at, 10.0) for (who, at), _ in STEPS]
        assert got == [held for _, held in STEPS]
        # Another piece of work is claimed apart.
        assert claims["a"].take("digest:2025-12-01", 116.0, 10.0)
    finally:
        for conn in conns.values():
            conn.close()
