"""Settings of the analyzer (the ``analyzer:`` section of the one YAML config)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from analyzer.baselines import BaselinePolicy
from analyzer.signals import SignalSpec, build_catalogue
from oximeter.errors import ConfigError


class BaselineSettings(BaseModel):
    """How baselines are formed (see analyzer/baselines.py)."""

    model_config = ConfigDict(extra="forbid")

    lags_s: list[float] = Field(default_factory=lambda: [86400.0, 7 * 86400.0])
    seasonal_half_window_s: float = Field(1800.0, gt=0)
    recent_window_s: float = Field(3600.0, gt=0)
    min_history_s: float = Field(86400.0, ge=0)
    margin_abs: float = Field(0.0, ge=0)
    margin_rel: float = Field(0.05, ge=0)

    @field_validator("lags_s")
    @classmethod
    def _lags_positive(cls, lags: list[float]) -> list[float]:
        if any(lag <= 0 for lag in lags):
            raise ValueError("every lag must be positive")
        return lags

    def policy(self) -> BaselinePolicy:
        """The frozen policy the baseline functions take."""
        return BaselinePolicy(
            lags_s=tuple(self.lags_s), seasonal_half_window_s=self.seasonal_half_window_s,
            recent_window_s=self.recent_window_s, min_history_s=self.min_history_s,
            margin_abs=self.margin_abs, margin_rel=self.margin_rel,
        )


class PrometheusSettings(BaseModel):
    """Where the analyzer reads from: any Prometheus-HTTP-API store (Prometheus, Thanos, Mimir, VM)."""

    model_config = ConfigDict(extra="forbid")

    url: str = "http://127.0.0.1:9090"
    timeout_s: float = Field(30.0, gt=0)
    retries: int = Field(3, ge=0)
    # Name of the env var (or ``<NAME>_FILE``) holding a bearer token; never the token itself.
    bearer_token_env: str | None = None
    # True, False, or a CA bundle path.
    tls_verify: bool | str = True
    use_recording_rules: bool = True


class AnalyzerSettings(BaseModel):
    """The analyzer: data source, grid, baselines and the signal catalogue's overrides."""

    model_config = ConfigDict(extra="forbid")

    prometheus: PrometheusSettings = PrometheusSettings()
    step_s: float = Field(15.0, ge=1)
    interval_s: float = Field(30.0, gt=0)
    live_window_s: float = Field(3600.0, gt=0)
    baseline: BaselineSettings = BaselineSettings()
    # name -> fields: overrides a catalogue signal, or defines a new one (layer, kind, promql).
    signals: dict[str, dict[str, Any]] = Field(default_factory=dict)
    disabled_signals: list[str] = Field(default_factory=list)

    @field_validator("signals")
    @classmethod
    def _signals_valid(cls, signals: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        try:
            build_catalogue(signals)
        except ConfigError as exc:
            raise ValueError("; ".join(exc.problems)) from None
        return signals

    def catalogue(self) -> dict[str, SignalSpec]:
        """The signals to evaluate: the catalogue with overrides, minus the disabled ones."""
        built = build_catalogue(self.signals)
        return {name: spec for name, spec in built.items() if name not in self.disabled_signals}
