"""Settings of the analyzer (the ``analyzer:`` section of the one YAML config)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from oximeter.errors import ConfigError

if TYPE_CHECKING:
    from analyzer.baselines import BaselinePolicy
    from analyzer.diagnosis import Thresholds
    from analyzer.signals import SignalSpec

# The signal catalogue, baselines and diagnosis import pandas and numpy: they are imported inside
# the methods that build them, so reading this section (``oximeter config check``) stays light.


class BaselineSettings(BaseModel):
    """How baselines are formed (see analyzer/baselines.py)."""

    model_config = ConfigDict(extra="forbid")

    lags_s: list[float] = Field(default_factory=lambda: [86400.0, 7 * 86400.0], description=(
        "seconds back to the same time of day or week; the candidate closest to the value is the baseline"))
    seasonal_half_window_s: float = Field(1800.0, gt=0, description=(
        "half width, in seconds, of the median taken around each lagged time"))
    recent_window_s: float = Field(3600.0, gt=0, description=(
        "seconds of recent past whose median and spread form the recent baseline"))
    min_history_s: float = Field(86400.0, ge=0, description=(
        "seconds of history a series needs before seasonal baselines count; until then its static "
        "threshold decides"))
    margin_abs: float = Field(0.0, ge=0, description=(
        "smallest deviation scale, in the signal's unit, so a flat series is not alarmed on noise"))
    margin_rel: float = Field(0.05, ge=0, description=(
        "smallest deviation scale as a fraction of the baseline (0.05: 5 %)"))

    @field_validator("lags_s")
    @classmethod
    def _lags_positive(cls, lags: list[float]) -> list[float]:
        if any(lag <= 0 for lag in lags):
            raise ValueError("every lag must be positive")
        return lags

    def policy(self) -> BaselinePolicy:
        """The frozen policy the baseline functions take."""
        from analyzer.baselines import BaselinePolicy

        return BaselinePolicy(
            lags_s=tuple(self.lags_s), seasonal_half_window_s=self.seasonal_half_window_s,
            recent_window_s=self.recent_window_s, min_history_s=self.min_history_s,
            margin_abs=self.margin_abs, margin_rel=self.margin_rel,
        )


class PrometheusSettings(BaseModel):
    """Where the analyzer reads from: any Prometheus-HTTP-API store (Prometheus, Thanos, Mimir, VM)."""

    model_config = ConfigDict(extra="forbid")

    url: str = Field("http://127.0.0.1:9090", description="base URL of the Prometheus HTTP API")
    timeout_s: float = Field(30.0, gt=0, description="seconds one query may take")
    retries: int = Field(3, ge=0, description="retries of a failed query, with back-off, before giving up")
    # Name of the env var (or ``<NAME>_FILE``) holding a bearer token; never the token itself.
    bearer_token_env: str | None = None
    # True, False, or a CA bundle path.
    tls_verify: bool | str = True
    use_recording_rules: bool = Field(True, description=(
        "query the recording rules of alert_rules/ where a signal has one, instead of its raw PromQL"))


class AnalyzerSettings(BaseModel):
    """The analyzer: data source, grid, baselines and the signal catalogue's overrides."""

    model_config = ConfigDict(extra="forbid")

    prometheus: PrometheusSettings = Field(PrometheusSettings(), description="where metrics are read")
    step_s: float = Field(15.0, ge=1, description="seconds between two points of the series it evaluates")
    interval_s: float = Field(30.0, gt=0, description="seconds between two analysis cycles")
    live_window_s: float = Field(3600.0, gt=0, description="seconds of recent series each cycle reads")
    baseline: BaselineSettings = Field(BaselineSettings(), description="how baselines are formed")
    # name -> fields: overrides a catalogue signal, or defines a new one (layer, kind, promql).
    signals: dict[str, dict[str, Any]] = Field(default_factory=dict)
    disabled_signals: list[str] = Field(default_factory=list, description="catalogue signals not evaluated")

    @field_validator("signals")
    @classmethod
    def _signals_valid(cls, signals: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        from analyzer.signals import build_catalogue

        try:
            build_catalogue(signals)
        except ConfigError as exc:
            raise ValueError("; ".join(exc.problems)) from None
        return signals

    def catalogue(self) -> dict[str, SignalSpec]:
        """The signals to evaluate: the catalogue with overrides, minus the disabled ones."""
        from analyzer.signals import build_catalogue

        built = build_catalogue(self.signals)
        return {name: spec for name, spec in built.items() if name not in self.disabled_signals}


class IncidentSettings(BaseModel):
    """The ``incidents:`` section: correlation window, lifecycle timings, store and API."""

    model_config = ConfigDict(extra="forbid")

    store_path: str = "oximeter.db"  # the shared store (the outbox lives in it too)
    lookback_s: float = Field(900.0, gt=0, description=(
        "seconds within which anomalies on related entities join one incident"))
    resolve_after_s: float = Field(600.0, ge=0, description=(
        "seconds without a new anomaly before an incident resolves"))
    reopen_window_s: float = Field(3600.0, ge=0, description=(
        "seconds after resolving during which the same fault re-opens its incident instead of a new one"))
    api_host: str = Field("127.0.0.1", description="address the incidents API listens on")
    api_port: int = Field(9471, ge=0, le=65535, description="port of the incidents API (0: any free port)")
    gpu_util_low: float = Field(0.5, ge=0, le=1, description=(
        "GPU utilisation below this while requests queue points at scheduling, not the GPU"))
    gpu_util_high: float = Field(0.85, ge=0, le=1, description=(
        "GPU utilisation above this while requests queue means capacity is exhausted"))
    kv_full: float = Field(0.95, ge=0, le=1, description="KV-cache usage at or above this counts as full")

    def thresholds(self) -> Thresholds:
        """The rule thresholds this section overrides."""
        from analyzer.diagnosis import Thresholds

        return Thresholds(gpu_util_low=self.gpu_util_low, gpu_util_high=self.gpu_util_high,
                          kv_full=self.kv_full)
