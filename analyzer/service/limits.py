"""The catalogue's limits by name (``signal.field``), and the catalogue a configuration makes.

The alerting rules' templates (``alert_rules/templates/``), the dashboards and the digest chart
name these limits (``oximeter/limits.py`` fills them in), so each number is set once, in
``analyzer/signals/catalogue.py`` (or, for an alert that judges no single signal,
``analyzer/signals/alert_limits.py``), and a configured override (``analyzer.signals``,
``analyzer.alert_limits``) moves every copy.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from analyzer.detection.judges import detectors_of
from analyzer.signals.alert_limits import alert_limits
from analyzer.signals.catalogue import CATALOGUE, build_catalogue
from analyzer.signals.spec import SignalSpec
from oximeter.config import load_section

# A signal's own limits: where its detectors fire.
SPEC_FIELDS = ("threshold", "ratio", "min_delta", "increase", "capacity")
# Limits its detectors hold beside those (a counter's floor under the ratio criterion, a trend's
# least rise a window), read from the detectors the signal builds.
DETECTOR_FIELDS = ("ratio_min_increase", "min_rise_rel")


def limits(catalogue: Mapping[str, SignalSpec] = CATALOGUE,
           alert_overrides: Mapping[str, Mapping[str, float]] | None = None) -> dict[str, float]:
    """``{"queue_wait_p99.threshold": 1.0, "queue_wait_p99.min_traffic": 50.0, ...}``: every limit a
    signal sets (``min_traffic``: its traffic guard's minimum), and the limits of the alerts that
    judge no single signal, with ``alert_overrides`` (``analyzer.alert_limits``) applied."""
    out = alert_limits(alert_overrides)
    for name, spec in catalogue.items():
        for field in SPEC_FIELDS:
            if (number := getattr(spec, field)) is not None:
                out[f"{name}.{field}"] = float(number)
        if spec.min_traffic is not None:
            out[f"{name}.min_traffic"] = spec.min_traffic.minimum
        for detector in detectors_of(spec):
            for field in DETECTOR_FIELDS:
                if (number := getattr(detector, field, None)) is not None:
                    out[f"{name}.{field}"] = float(number)
    return out


def configured_catalogue(config: str | Path | None) -> dict[str, SignalSpec]:
    """The catalogue with the configuration's ``analyzer.signals`` overrides (disabled signals kept:
    an alert keeps its configured limit whether or not the analyzer evaluates the signal)."""
    from analyzer.service.settings import AnalyzerSettings

    return build_catalogue(load_section("analyzer", AnalyzerSettings, config).signals)


def configured_limits(config: str | Path | None) -> dict[str, float]:
    """Every limit by name as the configuration sets it: its signals' (``analyzer.signals``) and its
    signal-less alerts' (``analyzer.alert_limits``)."""
    from analyzer.service.settings import AnalyzerSettings

    settings = load_section("analyzer", AnalyzerSettings, config)
    return limits(build_catalogue(settings.signals), settings.alert_limits)
