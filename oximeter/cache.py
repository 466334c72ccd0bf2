"""Where Oximeter keeps what it can rebuild: one per-user folder, shared by every checkout.

Generated histories are keyed by everything they depend on (the scenario, the window, the step and
the simulator's own code), so a fresh clone of the same code reuses what an earlier one generated
instead of paying minutes of CPU again, and a changed simulator never reads a stale entry.
``OXIMETER_CACHE_DIR`` moves it; otherwise it follows the XDG base-directory convention.
"""

from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV = "OXIMETER_CACHE_DIR"


def cache_root() -> Path:
    """``$OXIMETER_CACHE_DIR``, else ``$XDG_CACHE_HOME/oximeter``, else ``~/.cache/oximeter``."""
    explicit = os.environ.get(CACHE_ENV)
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "oximeter"


def cache_dir(name: str) -> Path:
    """The cache folder for one kind of thing (created on first write by its user)."""
    return cache_root() / name
