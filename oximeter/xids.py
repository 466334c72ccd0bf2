"""Which NVIDIA Xid codes page: the one list the exporter, the analyzer and the rules' tests use.

The exporter starts these codes' counters at 0 so that the first event is visible to increase()
and changes(); the analyzer's ``xid_paging`` signal and the GpuXidCritical alert select them.
Standard library only: the exporter imports it on GPU hosts.
"""

from __future__ import annotations

# Double-bit ECC (48), row remap events (63, 64), NVLink (74), GPU fallen off the bus (79),
# high single-bit ECC rate (92), contained and uncontained ECC (94, 95), GSP errors (119, 120).
PAGING_XIDS: tuple[int, ...] = (48, 63, 64, 74, 79, 92, 94, 95, 119, 120)
# Application faults (bad kernel, MMU fault, stopped process): informational, the engine's to fix.
APPLICATION_XIDS: tuple[int, ...] = (13, 31, 43)


def xid_pattern(codes: tuple[int, ...] = PAGING_XIDS) -> str:
    """The codes as a PromQL regex alternation (``48|63|...``) for ``xid=~"..."``."""
    return "|".join(str(code) for code in codes)
