"""Settings of the analyzer (the ``analyzer:`` section of the one YAML config)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from analyzer.signals.sources.prometheus_settings import PrometheusSettings
from oximeter.errors import ConfigError

if TYPE_CHECKING:
    from analyzer.detection.baselines import BaselinePolicy
    from analyzer.signals.spec import SignalSpec
    from analyzer.signals.stock_inputs import StockInputs

# Whose telemetry the analyzer reads (``analyzer.inputs``, ``oximeter analyze --inputs``).
InputProfile = Literal["oximeter", "stock", "mixed"]

# The signal catalogue, baselines and diagnosis import pandas and numpy: they are imported inside
# the methods that build them, so reading this section (``oximeter config check``) stays light.


class BaselineSettings(BaseModel):
    """How baselines are formed (see analyzer/detection/baselines.py)."""

    model_config = ConfigDict(extra="forbid")

    # Seconds back to compare with the same time of day: 1 d and 7 d, so daily and weekly rhythms
    # are not anomalies.
    lags_s: list[float] = Field(default_factory=lambda: [86400.0, 7 * 86400.0])
    # Seconds either side of the same time of day that a seasonal baseline takes its median over.
    seasonal_half_window_s: float = Field(1800.0, gt=0)
    # Seconds of recent past, before each sample, that the trailing median and IQR baseline covers.
    recent_window_s: float = Field(3600.0, gt=0)
    # Seconds of history before seasonal baselines apply; until then the recent baseline stands
    # alone and the events it raises say they are provisional.
    min_history_s: float = Field(86400.0, ge=0)
    # Smallest baseline scale, in the signal's unit, so a flat history does not make tiny wiggles
    # anomalous (0: none).
    margin_abs: float = Field(0.0, ge=0)
    # Smallest baseline scale as a fraction of the baseline's centre (0.05: 5 %), for the same reason.
    margin_rel: float = Field(0.05, ge=0)

    @field_validator("lags_s")
    @classmethod
    def _lags_positive(cls, lags: list[float]) -> list[float]:
        if any(lag <= 0 for lag in lags):
            raise ValueError("every lag must be positive")
        return lags

    def policy(self) -> BaselinePolicy:
        """The frozen policy the baseline functions take."""
        from analyzer.detection.baselines import BaselinePolicy

        return BaselinePolicy(
            lags_s=tuple(self.lags_s), seasonal_half_window_s=self.seasonal_half_window_s,
            recent_window_s=self.recent_window_s, min_history_s=self.min_history_s,
            margin_abs=self.margin_abs, margin_rel=self.margin_rel,
        )


class HaSettings(BaseModel):
    """Several analyzers on one shared store: one leads each shard, the others stand by."""

    model_config = ConfigDict(extra="forbid")

    # Lead by lease instead of refusing a second analyzer on the store: the leader opens incidents
    # and notifies; a standby runs the same cycles (its windows stay warm) but writes and tells
    # nothing, and takes over once the leader's lease has lapsed. Give the store as a postgresql://
    # URL when the analyzers run on several hosts.
    enabled: bool = False
    # Seconds a lease lasts without renewal: a leader that dies is replaced after at most this
    # long plus renew_s (a standby's look) and one cycle. Clocks of the hosts must agree to well
    # within it.
    lease_s: float = Field(30.0, ge=2)
    # Seconds between the leader's renewals (also between a standby's looks at the lease); at most
    # a third of lease_s, so two missed renewals do not yet lose the lease.
    renew_s: float = Field(10.0, gt=0)
    # This analyzer's shard: analyzers with the same shard elect one leader among them. Shards
    # share the store, so the incidents API, the page and the digest show the whole fleet; each
    # shard's leader tracks and tells its own shard's incidents.
    shard: str = Field("default", min_length=1, max_length=100)
    # The shard's part of the fleet, as PromQL label matchers added to every query (and applied
    # to a replayed history's series as the analyzer reads them): e.g. node=~"gpu-(0|1).*" or
    # cluster="east". What the analyzer reads of a node names that node, a stock fleet's through
    # the adapter records (a container by its pod's kube_pod_info, a GPU by dcgm-exporter's
    # Hostname), and a node matcher on a query joining a pod's series to kube_pod_info goes on
    # kube_pod_info; another label must be added to every series at scrape time. A series without the
    # label (a deployment's rollout) reads as "" to the matchers, so one shard should take those
    # (node!="n1" does). Empty: the whole fleet.
    selector: str = ""

    @field_validator("selector")
    @classmethod
    def _selector_parses(cls, text: str) -> str:
        from oximeter.promql import parse_matchers

        parse_matchers(text)
        return text

    @model_validator(mode="after")
    def _renew_within_lease(self) -> HaSettings:
        if self.renew_s * 3 > self.lease_s:
            raise ValueError(f"renew_s ({self.renew_s:g}) must be at most a third of "
                             f"lease_s ({self.lease_s:g})")
        return self


class AnalyzerSettings(BaseModel):
    """The analyzer: data source, grid, baselines and the signal catalogue's overrides."""

    model_config = ConfigDict(extra="forbid")

    # The store the signals are read from.
    prometheus: PrometheusSettings = PrometheusSettings()
    # Seconds between the samples every signal is read at (the query step).
    step_s: float = Field(15.0, ge=1)
    # Seconds between the daemon's detection cycles; doubled per consecutive store failure, up to 5 minutes.
    interval_s: float = Field(30.0, gt=0)
    # Seconds of recent samples each cycle evaluates; older samples count as settled in the store.
    live_window_s: float = Field(3600.0, gt=0)
    # How the baselines that signals are judged against are formed.
    baseline: BaselineSettings = BaselineSettings()
    # name -> fields: overrides a catalogue signal, or defines a new one (layer, kind, promql). A
    # signal given a new promql reads it as written, not the shipped recording rule (which computes
    # the shipped query); set its record too to read a rule of your own.
    signals: dict[str, dict[str, Any]] = Field(default_factory=dict)
    # Names of catalogue signals to switch off: they are neither read nor evaluated.
    disabled_signals: list[str] = Field(default_factory=list)
    # name -> field -> value: overrides a limit of an alert that judges no single signal (e.g.
    # gpu_memory_full: {threshold: 0.95}); the limits and their defaults are listed in docs/metrics.md.
    alert_limits: dict[str, dict[str, float]] = Field(default_factory=dict)
    # Whose telemetry the signals read: Oximeter's exporter and gateway ("oximeter"), stock
    # dcgm-exporter, vLLM and kube-state-metrics through the recording rules in
    # alert_rules/adapters ("stock", see docs/stock-telemetry.md), or both ("mixed": Oximeter's own
    # series win where a node has them). On "stock", signals that nothing feeds are left out and named.
    inputs: InputProfile = "oximeter"
    # The counters CSV dcgm-exporter runs with; unset: its shipped default list (ECC fields off).
    dcgm_counters: str | None = None
    # Active/standby analyzers on one store (off: one analyzer per store, a second one refused).
    ha: HaSettings = HaSettings()

    @field_validator("dcgm_counters")
    @classmethod
    def _counters_readable(cls, path: str | None) -> str | None:
        if path is not None:
            from analyzer.signals.stock_inputs import read_counters_csv

            try:
                read_counters_csv(path)
            except (OSError, UnicodeDecodeError) as exc:
                raise ValueError(f"cannot read the dcgm-exporter counters file {path!r}: {exc}") from None
        return path

    @field_validator("signals")
    @classmethod
    def _signals_valid(cls, signals: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        from analyzer.detection.judges import detector_problems
        from analyzer.signals.catalogue import build_catalogue

        try:
            built = build_catalogue(signals)
        except ConfigError as exc:
            raise ValueError("; ".join(exc.problems)) from None
        # A listed detector is built once here, so a bad type or parameter fails the config.
        problems = detector_problems({name: built[name] for name in signals})
        if problems:
            raise ValueError("; ".join(problems))
        return signals

    @field_validator("alert_limits")
    @classmethod
    def _alert_limits_known(cls, overrides: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
        from analyzer.signals.alert_limits import alert_limits

        try:
            alert_limits(overrides)
        except ConfigError as exc:
            raise ValueError("; ".join(exc.problems)) from None
        return overrides

    def _configured(self) -> dict[str, SignalSpec]:
        """The catalogue with overrides, minus the disabled signals."""
        from analyzer.signals.catalogue import build_catalogue

        built = build_catalogue(self.signals)
        return {name: spec for name, spec in built.items() if name not in self.disabled_signals}

    def catalogue(self) -> dict[str, SignalSpec]:
        """The signals to evaluate: the catalogue with overrides, minus the disabled ones and, on
        stock inputs, minus those no exporter feeds (said by ``missing_inputs``, never silently quiet)."""
        catalogue = self._configured()
        unavailable = self.stock_inputs().unavailable(catalogue) if self.inputs == "stock" else set()
        return {name: spec for name, spec in catalogue.items() if name not in unavailable}

    def stock_inputs(self) -> StockInputs:
        """What the stock exporters collect: the dcgm-exporter counters file, or its default list."""
        from analyzer.signals.stock_inputs import DCGM_DEFAULT_FIELDS, StockInputs, read_counters_csv

        fields = read_counters_csv(self.dcgm_counters) if self.dcgm_counters else DCGM_DEFAULT_FIELDS
        return StockInputs(fields)

    def unreadable_context(self) -> frozenset[str]:
        """The rules' context signals (``analyzer.service.pipeline.CONTEXT``) the inputs cannot feed."""
        if self.inputs != "stock":
            return frozenset()
        from analyzer.service.pipeline import CONTEXT

        return frozenset(self.stock_inputs().unavailable(CONTEXT))

    def missing_inputs(self) -> list[str]:
        """On stock inputs, one line per series the signals need and the exporters lack, naming
        what would produce it and the signals it disables; empty otherwise."""
        if self.inputs != "stock":
            return []
        from analyzer.signals.stock_inputs import describe

        return [f"analyzer.inputs: stock: {line}" for line in
                describe(self.stock_inputs().missing(self._configured()))]

    def not_judged(self) -> tuple[str, ...]:
        """On stock inputs, the gateway-only series every incident is judged without, in
        ``missing_inputs``' words (each names the signals it disables); empty otherwise."""
        if self.inputs != "stock":
            return ()
        from analyzer.signals.stock_inputs import describe, gateway_only

        return tuple(describe(gateway_only(self.stock_inputs().missing(self._configured()))))
