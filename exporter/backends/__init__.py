"""GPU backends: registration is this explicit dict; a backend's module is imported when chosen.

Lazy so that ``--backend sim`` never imports ``pynvml``. A new backend is one file (a class with
``from_settings(settings, node)`` and the ``GpuBackend`` methods, see ``base.py``) and one line here.
"""

from __future__ import annotations

# name -> "module:class"
BACKENDS: dict[str, str] = {
    "none": "exporter.backends.none:NoGpuBackend",
    "nvml": "exporter.backends.nvml:NvmlBackend",
    "sim": "exporter.backends.sim:SimBackend",
}
