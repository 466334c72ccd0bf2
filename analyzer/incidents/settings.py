"""Settings of the incidents (the ``incidents:`` section of the one YAML config): correlation window,
lifecycle timings, store, API and planned maintenance."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from analyzer.incidents.maintenance import MaintenanceWindow

if TYPE_CHECKING:
    from analyzer.diagnosis.case import Thresholds


class MaintenanceSettings(BaseModel):
    """One planned maintenance window (``incidents.maintenance``): detection goes on, and chat hears
    nothing of the incidents whose root cause lies under it until it ends."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    node: str | None = Field(None, description="the node under maintenance")
    gpu: str | None = Field(None, description="one GPU index of the node (default: the whole node)")
    service: str | None = Field(None, description="the service under maintenance (alone, or on the node)")
    start: datetime = Field(alias="from", description="ISO-8601 start (no offset: UTC)")
    end: datetime = Field(alias="to", description="ISO-8601 end (no offset: UTC)")
    # Why the work happens, in free text; shown with the window.
    reason: str = ""

    @field_validator("gpu", mode="before")
    @classmethod
    def _gpu(cls, value: Any) -> Any:
        return str(value) if isinstance(value, int) and not isinstance(value, bool) else value

    @field_validator("start", "end")
    @classmethod
    def _utc(cls, value: datetime) -> datetime:
        return value if value.tzinfo is not None else value.replace(tzinfo=UTC)

    @model_validator(mode="after")
    def _valid(self) -> MaintenanceSettings:
        self.window()
        return self

    def window(self) -> MaintenanceWindow:
        """The window these settings declare."""
        return MaintenanceWindow(self.start, self.end, self.node, self.gpu, self.service, self.reason,
                                 "config")


class IncidentSettings(BaseModel):
    """The ``incidents:`` section: correlation window, lifecycle timings, store and API."""

    model_config = ConfigDict(extra="forbid")

    # the shared store (the outbox lives in it too): a SQLite file, or a postgresql:// URL
    store_path: str = "oximeter.db"
    # Seconds: events that share a node, GPU or service and whose spans come this close are
    # grouped into one incident.
    lookback_s: float = Field(900.0, gt=0)
    # How long every member of an incident must be normal before it resolves; doubled each time
    # the incident has re-opened (up to reopen_window_s): a fault that comes and goes is still on.
    resolve_after_s: float = Field(600.0, ge=0)
    # A finding with a resolved incident's root cause (or one of its members) within this long of
    # its resolve re-opens it instead of opening another: a fault that goes quiet between busy
    # hours (a cut KV pool at night) and returns is the same fault, told as back, with its history.
    reopen_window_s: float = Field(14400.0, ge=0)
    # How long a stronger root-cause candidate must hold before it replaces the incumbent.
    root_cause_dwell_s: float = Field(300.0, ge=0)
    # Address the incidents API listens on; loopback by default, so nothing outside the host reaches it.
    api_host: str = "127.0.0.1"
    # Port of the incidents API (oximeter analyze --port PORT overrides it).
    api_port: int = Field(9471, ge=0, le=65535)
    # The diagnosis rules' GPU-utilisation limits: below gpu_util_low the GPUs idle while requests
    # queue (a scheduling bottleneck), above gpu_util_high the fleet is full (capacity exhausted).
    gpu_util_low: float = Field(0.5, ge=0, le=1)
    # GPU utilisation (0 to 1) above which the fleet counts as full when requests queue.
    gpu_util_high: float = Field(0.85, ge=0, le=1)
    maintenance: list[MaintenanceSettings] = Field(
        default_factory=list, description="planned maintenance windows (more: `oximeter maintenance add`)")

    def thresholds(self) -> Thresholds:
        """The diagnosis rules' own limits (the others are signal thresholds: ``analyzer.signals``)."""
        from analyzer.diagnosis.case import Thresholds

        return Thresholds(gpu_util_low=self.gpu_util_low, gpu_util_high=self.gpu_util_high)
