"""Where runbook links point: the shipped ``docs/runbook.md``, or where readers open it.

Incidents and alert annotations carry the shipped path with the section's anchor
(``docs/runbook.md#thermal_throttle``); chat messages resolve it against
``reporter.runbook_url`` when that is configured (an absolute URL), so links work outside a
checkout of this repository.
"""

from __future__ import annotations

RUNBOOK_PATH = "docs/runbook.md"


def runbook_ref(anchor: str) -> str:
    """The shipped path of the runbook section ``anchor`` (a heading's GitHub-style anchor)."""
    return f"{RUNBOOK_PATH}#{anchor}"


def runbook_link(ref: str, base_url: str | None) -> str:
    """``ref`` as a reader opens it: under ``base_url`` when configured, else unchanged."""
    if base_url and ref.startswith(f"{RUNBOOK_PATH}#"):
        return base_url + ref[len(RUNBOOK_PATH):]
    return ref
