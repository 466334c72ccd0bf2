"""Incidents and change records the store could not write (a full disk), kept until it can.

Nothing is acknowledged that is not stored: the tracker moves on in memory, so an incident whose
save failed would otherwise never be written (its next cycle finds it open already) nor told.
Each cycle saves everything held together with what is new; meanwhile the daemon tells each
held change once, through every channel that still works, with how many incidents are held.
"""

from __future__ import annotations

import dataclasses
import sqlite3
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from loguru import logger

from analyzer.incidents.lifecycle import Change, Incident
from analyzer.incidents.store import IncidentStore

Tell = Callable[[Change, Incident | None], None]
Notice = Callable[[str, str], None]


@dataclass
class Unsaved:
    """What the store owes: the newest version of each incident, and change records by key."""

    incidents: dict[str, Incident] = field(default_factory=dict)
    changes: dict[str, Change] = field(default_factory=dict)
    told: set[str] = field(default_factory=set)  # change keys already told while held
    failing: bool = False

    def save(self, store: IncidentStore, touched: Iterable[Incident], changes: Sequence[Change],
             now: datetime, tell: Tell, notice: Notice) -> bool:
        """Save what is held and what is new in one transaction; whether the store took it.

        While it refuses, each held change is told once (``tell``), its text saying how many
        incidents are held, and the first failure and the recovery are one ``notice`` each.
        """
        self.incidents.update((inc.id, inc) for inc in touched)
        self.changes.update((c.key, c) for c in changes)
        held = len(self.incidents)
        try:
            store.save(list(self.incidents.values()), list(self.changes.values()))
        except sqlite3.Error as exc:
            note = f"store failing: {held} incident(s) held in memory"
            logger.error("analyzer: the store cannot write ({}); {}", exc, note)
            if not self.failing:
                notice(f"analyzer:store_failing:{now:%Y%m%dT%H%M%S}",
                       f"{note} ({exc}); they are written once it can write again")
            self.failing = True
            for change in self.untold():
                told = dataclasses.replace(change, text=f"{change.text}\n{note}")
                tell(told, self.incidents.get(change.incident_id))
                self.told.add(change.key)
            return False
        if self.failing:
            logger.info("analyzer: the store writes again; {} held incident(s) written", held)
            notice(f"analyzer:store_back:{now:%Y%m%dT%H%M%S}",
                   f"store writing again: {held} incident(s) held in memory were written")
        self.incidents.clear()
        self.changes.clear()
        self.told.clear()
        self.failing = False
        return True

    def untold(self) -> list[Change]:
        """Held change records not told yet, oldest first."""
        return sorted((c for k, c in self.changes.items() if k not in self.told),
                      key=lambda c: (c.at, c.incident_id, c.seq))
