"""The exporters' recorded output (tests/fixtures/real/) read as Prometheus reads it.

client_python's parser renames a counter's samples to ``<name>_total``; Prometheus keeps the names
an exporter writes (dcgm-exporter's counters have no ``_total``), so the captures are read here
line by line: the families' declared types, and every sample with its own name and labels.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

REAL = Path(__file__).resolve().parent / "fixtures" / "real"
_SAMPLE = re.compile(r"^([A-Za-z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)")
_LABEL = re.compile(r'([A-Za-z_]\w*)="((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class Sample:
    """One sample line: name, labels in the order written, value."""

    name: str
    labels: tuple[tuple[str, str], ...]
    value: float


def read(text: str) -> tuple[dict[str, str], list[Sample]]:
    """(family -> its TYPE, the samples) of a text exposition."""
    types: dict[str, str] = {}
    samples = []
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(maxsplit=3)
            types[name] = kind.strip()
        elif line and not line.startswith("#"):
            m = _SAMPLE.match(line)
            assert m, line
            samples.append(Sample(m.group(1), tuple(_LABEL.findall(m.group(2) or "")), float(m.group(3))))
    return types, samples


def fixture(name: str) -> tuple[dict[str, str], list[Sample]]:
    """A capture of tests/fixtures/real/, after checking it names its source."""
    text = (REAL / name).read_text(encoding="utf-8")
    assert text.startswith("# source: "), f"{name}: the first line must name where it came from"
    return read(text)
