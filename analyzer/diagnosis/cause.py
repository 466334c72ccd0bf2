"""What a diagnosis blames: the signal and series held responsible (light: the incident record
and the reporter read it without the data stack)."""

from __future__ import annotations

from dataclasses import dataclass

from analyzer.diagnosis.topology import Labels

DESCRIPTIVE_LABELS = frozenset({"uuid", "pci_bus_id", "gpu_model"})


@dataclass(frozen=True)
class RootCause:
    """The signal and entity held responsible."""

    signal: str
    labels: Labels

    @property
    def entity(self) -> str:
        """``gpu=3,node=n1`` for humans (identifying labels only: no uuid, PCI id or GPU model)."""
        return ",".join(f"{k}={v}" for k, v in self.labels if k not in DESCRIPTIVE_LABELS)
