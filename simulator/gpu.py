"""One simulated GPU: utilisation, power, temperature and clocks driven by its engine's batch,
plus hardware faults (ECC, Xid, throttling, replays, a degrading NVLink, falling off the bus) and
the engine's leaks into its framebuffer.

The engine drives the GPU (``step(util)``) and the GPU drives the engine back
(``compute_slowdown``, ``lost``): a throttled or slow card slows the whole tensor-parallel engine.
"""

from __future__ import annotations

import math
import random
import uuid as uuidlib
from dataclasses import dataclass, field
from typing import Any

from exporter.backends.base import NVLINK_ERROR_KINDS
from simulator.fault_kinds import FAULT_KINDS, Effect
from simulator.faults import FaultBook

MIB = 1 << 20
GIB = 1 << 30
# Where H100s start hardware slowdown; above the 85 °C GpuTemperatureHigh threshold.
THROTTLE_CELSIUS = 92.0
# Memory in use on a card beyond what its processes report (the CUDA context and driver).
CONTEXT_BYTES = 512 * MIB
# A degrading NVLink, per CRC-failed flit (the fault's strength counts those): each is replayed, one
# in ten carried corrupt data, and one in a hundred cost a link recovery (retraining).
NVLINK_ERRORS_PER_CRC_FLIT = {"crc_flit": 1.0, "crc_data": 0.1, "replay": 1.0, "recovery": 0.01}
# What a degraded link still carries of its traffic (its time goes to replays and retraining).
NVLINK_DEGRADED_BANDWIDTH = 0.5
# The share of a decode step a tensor-parallel engine spends in its NVLink all-reduce on healthy
# links; the collective runs at its slowest link's pace, so that share stretches on a bad link.
TP_COMM_SHARE = 0.15
# Effects that happen once, when their fault starts.
_ONCE = frozenset({Effect.ECC_UNCORRECTABLE, Effect.XID, Effect.GPU_LOST})


@dataclass(frozen=True)
class GpuSpec:
    """A GPU model's fixed numbers (defaults: an H100 SXM 80 GB)."""

    name: str = "NVIDIA H100 80GB HBM3"
    memory_total_bytes: int = 80 * GIB
    power_limit_watts: float = 700.0
    idle_power_watts: float = 70.0
    sm_clock_max_hertz: float = 1980e6
    ambient_celsius: float = 32.0
    # Degrees above ambient at full load; a healthy card settles near 75 °C.
    load_rise_celsius: float = 43.0
    thermal_tau_s: float = 60.0
    # vLLM's --gpu-memory-utilization: the engine reserves this share of memory at start.
    preallocated_ratio: float = 0.9
    # NVLinks per GPU (an H100 SXM has 18; fewer keep simulated histories small) and what each
    # carries each way at full utilisation (tensor-parallel all-reduce traffic follows the load).
    nvlinks: int = 4
    nvlink_bytes_per_s_at_full: float = 20e9
    # PCIe traffic each way at full utilisation (prompts and sampled tokens, KV-cache swaps).
    pcie_bytes_per_s_at_full: float = 1e9


@dataclass
class GpuModel:
    """State of one GPU; ``step`` moves it forward, ``to_json`` is the fleet API's view."""

    spec: GpuSpec
    node: str
    index: int
    seed: int = 0
    utilization: float = 0.0
    temperature: float = 0.0
    ecc_corrected: float = 0.0
    ecc_uncorrected: int = 0
    remapped_correctable: int = 0
    remapped_uncorrectable: int = 0
    row_remap_pending: bool = False
    pcie_replays: float = 0.0
    # Per link: bytes each way and data-link errors by kind (NVLINK_ERROR_KINDS), since driver load.
    nvlink_bytes: list[float] = field(default_factory=list)
    nvlink_errors: list[dict[str, float]] = field(default_factory=list)
    xid_events: list[tuple[int, float]] = field(default_factory=list)
    _fired: set[str] = field(default_factory=set)
    _rng: random.Random = field(init=False)
    _last_now: float | None = None

    def __post_init__(self) -> None:
        self._rng = random.Random(f"{self.seed}/{self.node}/{self.index}")
        self.temperature = self.spec.ambient_celsius + 3.0
        self.uuid = "GPU-" + str(uuidlib.UUID(int=self._rng.getrandbits(128), version=4))
        node_no = int("".join(c for c in self.node if c.isdigit()) or 0)
        self.pci_bus_id = f"00000000:{(node_no * 16 + self.index * 2 + 0x18) % 256:02X}:00.0"
        self.nvlink_bytes = [0.0] * self.spec.nvlinks
        self.nvlink_errors = [dict.fromkeys(NVLINK_ERROR_KINDS, 0.0) for _ in range(self.spec.nvlinks)]

    # -- coupling to the engine -----------------------------------------------------------
    def clock_ratio(self, now: float, book: FaultBook) -> float:
        """SM clock as a fraction of its maximum (1 unless throttled)."""
        fault = book.strongest(now, self.node, gpu=self.index, effect=Effect.SM_CLOCK)
        return 1.0 if fault is None else max(0.05, fault.strength)

    def compute_slowdown(self, now: float, book: FaultBook) -> float:
        """How much longer this GPU takes for the same work (>= 1)."""
        slowdown = 1.0 / self.clock_ratio(now, book)
        slow = book.strongest(now, self.node, gpu=self.index, effect=Effect.COMPUTE)
        if slow is not None:
            slowdown *= slow.strength
        return slowdown

    def degraded_links(self, now: float, book: FaultBook) -> set[int]:
        """The NVLinks of this GPU degraded at ``now``."""
        return {f.link or 0 for f in book.active(now, self.node, gpu=self.index, effect=Effect.NVLINK_CRC)}

    def interconnect_slowdown(self, now: float, book: FaultBook) -> float:
        """How much longer the engine's steps take for this GPU's links (>= 1): the all-reduce's
        share of a step, stretched by a degraded link's lost bandwidth."""
        if not self.degraded_links(now, book):
            return 1.0
        return 1.0 + TP_COMM_SHARE * (1.0 / NVLINK_DEGRADED_BANDWIDTH - 1.0)

    def leaked_bytes(self, now: float, book: FaultBook) -> float:
        """GPU memory the engine has leaked by ``now``: each active gpu_memory_leak's rate times
        the time since it began (an ended leak was an engine restart, which freed it)."""
        leaks = book.active(now, self.node, gpu=self.index, effect=Effect.GPU_MEMORY_LEAK)
        return sum(f.strength * MIB * (now - f.start) / 60.0 for f in leaks)

    def reserved_bytes(self) -> int:
        """What a healthy engine holds: its preallocated share plus the CUDA context."""
        return int(self.spec.memory_total_bytes * self.spec.preallocated_ratio) + CONTEXT_BYTES

    def memory_used_bytes(self, now: float, book: FaultBook) -> int:
        """Framebuffer in use: the reservation plus any leak, at most the card's total."""
        used = self.reserved_bytes() + self.leaked_bytes(now, book)
        return int(min(used, self.spec.memory_total_bytes))

    def out_of_memory(self, now: float, book: FaultBook) -> bool:
        """True once a leak has filled the card: the engine's next allocation fails."""
        return self.reserved_bytes() + self.leaked_bytes(now, book) >= self.spec.memory_total_bytes

    def out_of_memory_at(self, now: float, book: FaultBook) -> float:
        """When the leaks active at ``now`` fill the card, if nothing changes (inf without a leak)."""
        leaks = book.active(now, self.node, gpu=self.index, effect=Effect.GPU_MEMORY_LEAK)
        rate = sum(f.strength * MIB / 60.0 for f in leaks)
        if rate <= 0:
            return math.inf
        headroom = self.spec.memory_total_bytes - self.reserved_bytes() - self.leaked_bytes(now, book)
        return now + max(0.0, headroom) / rate

    def lost(self, now: float, book: FaultBook) -> bool:
        """True while the GPU has fallen off the bus (Xid 79); the engine cannot run."""
        return book.strongest(now, self.node, gpu=self.index, effect=Effect.GPU_LOST) is not None

    # -- time -----------------------------------------------------------------------------
    def step(self, now: float, utilization: float, book: FaultBook, wall_origin_s: float) -> None:
        """Advance to ``now`` with the engine's busy fraction since the last step."""
        dt = 0.0 if self._last_now is None else max(0.0, now - self._last_now)
        self._last_now = now
        self.utilization = min(1.0, max(0.0, utilization))
        spec = self.spec
        target = spec.ambient_celsius + spec.load_rise_celsius * self.utilization
        self.temperature += (target - self.temperature) * (1 - math.exp(-dt / spec.thermal_tau_s))
        if book.strongest(now, self.node, gpu=self.index, effect=Effect.SM_CLOCK) is not None:
            # The fault is "the card has reached its slowdown temperature" (a failed fan, blocked
            # airflow): hot at once, and it cools with the thermal time constant afterwards.
            self.temperature = max(self.temperature, THROTTLE_CELSIUS)
        start = now - dt
        link_rate = spec.nvlink_bytes_per_s_at_full * self.utilization
        for link in range(spec.nvlinks):
            self.nvlink_bytes[link] += link_rate * dt
        for fault in book.all():
            if fault.node != self.node or fault.gpu != self.index:
                continue
            effects = FAULT_KINDS[fault.kind].effects
            # Rates are integrated over the overlap of this step with the fault's window.
            overlap = max(0.0, min(now, fault.end) - max(start, fault.start))
            if Effect.ECC_CORRECTED in effects:
                self.ecc_corrected += fault.strength / 60.0 * overlap
            if Effect.PCIE_REPLAYS in effects:
                self.pcie_replays += fault.strength / 60.0 * overlap
            if Effect.NVLINK_CRC in effects and (fault.link or 0) < spec.nvlinks:
                link = fault.link or 0
                self.nvlink_bytes[link] -= link_rate * overlap * (1.0 - NVLINK_DEGRADED_BANDWIDTH)
                for kind, per_flit in NVLINK_ERRORS_PER_CRC_FLIT.items():
                    self.nvlink_errors[link][kind] += fault.strength / 60.0 * per_flit * overlap
            if fault.id not in self._fired and fault.start <= now and not _ONCE.isdisjoint(effects):
                self._fired.add(fault.id)
                if Effect.ECC_UNCORRECTABLE in effects:
                    self.ecc_uncorrected += max(1, int(fault.strength))
                    self.remapped_uncorrectable += 1
                    self.row_remap_pending = True
                    self.xid_events.append((48, wall_origin_s + fault.start))
                if Effect.XID in effects:
                    self.xid_events.append((int(fault.strength), wall_origin_s + fault.start))
                if Effect.GPU_LOST in effects:
                    self.xid_events.append((79, wall_origin_s + fault.start))

    def power_watts(self, now: float, book: FaultBook) -> float:
        """Board power: idle plus a load share scaled by the clock actually running."""
        spec = self.spec
        load = self.utilization * self.clock_ratio(now, book)
        return spec.idle_power_watts + (spec.power_limit_watts * 0.85 - spec.idle_power_watts) * load

    def reasons(self, now: float, book: FaultBook) -> list[str]:
        """Active clock-event reasons, NVML names shortened as the exporter labels them."""
        if book.strongest(now, self.node, gpu=self.index, effect=Effect.SM_CLOCK) is not None:
            return ["hw_thermal", "sw_thermal"]
        return ["idle"] if self.utilization < 0.01 else []

    def to_json(self, now: float, book: FaultBook, wall_origin_s: float, engine_pid: int) -> dict[str, Any]:
        """This GPU in the fleet API's shape (``GET /fleet/gpus``); a lost GPU reads as nulls but its Xids."""
        spec = self.spec
        base: dict[str, Any] = {
            "index": self.index,
            "uuid": self.uuid,
            "name": spec.name,
            "pci_bus_id": self.pci_bus_id,
        }
        xids = [{"xid": x, "timestamp_seconds": ts} for x, ts in self.xid_events]
        if self.lost(now, book):
            # The readings are gone with the card, but the driver's Xid log stays readable (as the
            # NVML backend's event listener keeps it): Xid 79 is what explains the loss.
            return {**base, "lost": True, **dict.fromkeys(_READINGS), "xid_events": xids}
        used = self.memory_used_bytes(now, book)
        noise = self._rng.uniform(-0.4, 0.4)
        return {
            **base,
            "lost": False,
            "utilization_ratio": round(self.utilization, 4),
            "memory_used_bytes": used,
            "memory_total_bytes": spec.memory_total_bytes,
            "temperature_celsius": round(self.temperature + noise, 1),
            "power_watts": round(self.power_watts(now, book), 1),
            "power_limit_watts": spec.power_limit_watts,
            "sm_clock_hertz": self._clock_hertz(now, book),
            "sm_clock_max_hertz": spec.sm_clock_max_hertz,
            "clock_event_reasons": self.reasons(now, book),
            "ecc_corrected_total": int(self.ecc_corrected),
            "ecc_uncorrected_total": self.ecc_uncorrected,
            "remapped_rows_correctable": self.remapped_correctable,
            "remapped_rows_uncorrectable": self.remapped_uncorrectable,
            "row_remap_pending": self.row_remap_pending,
            "row_remap_failure": False,
            "pcie_replay_total": int(self.pcie_replays),
            "pcie_transmit_bytes_per_second": round(spec.pcie_bytes_per_s_at_full * self.utilization),
            "pcie_receive_bytes_per_second": round(spec.pcie_bytes_per_s_at_full * self.utilization),
            "xid_events": xids,
            "processes": [{"pid": engine_pid, "name": "vllm", "used_memory_bytes": used - CONTEXT_BYTES}],
            "nvlinks": [{"link": link, "up": True,
                         # Whole errors so far (rounded first: a minute's rate summed per step
                         # lands a hair under its integer).
                         "errors": {kind: int(round(n, 6)) for kind, n in self.nvlink_errors[link].items()},
                         "transmit_bytes": int(self.nvlink_bytes[link]),
                         "receive_bytes": int(self.nvlink_bytes[link])}
                        for link in range(spec.nvlinks)],
        }

    def _clock_hertz(self, now: float, book: FaultBook) -> float:
        ratio = self.clock_ratio(now, book)
        if ratio == 1.0 and self.utilization < 0.01:
            ratio = 0.5  # idle cards clock down; the "idle" reason says why
        return round(self.spec.sm_clock_max_hertz * ratio / 1e6) * 1e6


_READINGS = (
    "utilization_ratio",
    "memory_used_bytes",
    "memory_total_bytes",
    "temperature_celsius",
    "power_watts",
    "power_limit_watts",
    "sm_clock_hertz",
    "sm_clock_max_hertz",
    "clock_event_reasons",
    "ecc_corrected_total",
    "ecc_uncorrected_total",
    "remapped_rows_correctable",
    "remapped_rows_uncorrectable",
    "row_remap_pending",
    "row_remap_failure",
    "pcie_replay_total",
    "pcie_transmit_bytes_per_second",
    "pcie_receive_bytes_per_second",
    "processes",
    "nvlinks",
)
