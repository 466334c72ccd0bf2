"""GPU backends: registration is this explicit dict; a backend's module is imported when chosen.

Lazy so that ``--backend sim`` never imports ``pynvml``.
"""

from __future__ import annotations

# name -> "module:class"
BACKENDS: dict[str, str] = {
    "nvml": "exporter.backends.nvml:NvmlBackend",
    "sim": "exporter.backends.sim:SimBackend",
}
