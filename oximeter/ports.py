"""How a server tells whoever started it the port it bound: a JSON port file, written atomically.

Our servers bind port 0 (so no port is ever chosen before it is bound) and write what they got to
the ``--port-file`` they were given: one port, or ports by name (the simulator's by node). The
process that started them reads it back (``stack/ports.py``, once the file exists).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path


def write_port_file(path: str | Path, ports: int | Mapping[str, int]) -> None:
    """Write the bound port(s) as JSON, atomically: a reader sees the whole file or none."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(ports if isinstance(ports, int) else dict(ports)), encoding="utf-8")
    tmp.replace(path)


def read_port_file(path: Path) -> object:
    """What ``write_port_file`` wrote to ``path`` (an int or a ``{name: port}`` dict, unchecked)."""
    value: object = json.loads(path.read_text(encoding="utf-8"))
    return value
