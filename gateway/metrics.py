"""The gateway's metrics: names, labels and buckets are a contract (alert_rules/metric_catalogue.yml).

Every series carries ``service``, ``model`` and ``node``. ``model`` comes from the allow-list
(configured, or the upstream's ``/v1/models`` at warm-up), anything else is ``other``; ``route``
is one of ``ROUTES`` or ``other``. Counters with known ``code``/``reason`` values start at 0 so the
first event is visible to ``increase()``. Levels (queue length, in-flight, limits, target info)
are read from the admission controller at scrape time, so they are never stale.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from gateway.admission import AdmissionController, RejectReason
from gateway.answer import FINISH_REASONS, OTHER_FINISH, finish_label

OTHER = "other"
ROUTES = ("/v1/chat/completions", "/v1/completions", "/v1/models")
KNOWN_CODES = ("200", "400", "404", "408", "413", "415", "429", "499", "500", "502", "503", "504")
# Admission reasons plus the input checks that refuse a request before admission.
REJECT_REASONS = (
    RejectReason.QUEUE_FULL.value,
    RejectReason.PREDICTED_WAIT.value,
    "invalid_json",
    "body_too_large",
    "body_timeout",
    "unsupported_media_type",
    "limit_exceeded",
)
ABORT_REASONS = ("first_byte_timeout", "stream_idle_timeout", "client_disconnect", "upstream_error")
# Why a stream failed after its head went out: the engine went quiet, its connection broke, or it
# sent an error event itself.
STREAM_ERROR_REASONS = ("stream_idle_timeout", "upstream_error", "engine_error")
# A healthy queue wait is under 200 ms and 1 s pages; 5 ms–60 s covers both ends.
QUEUE_WAIT_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0)
LATENCY_BUCKETS_S = (0.01, 0.025, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0)
INTER_TOKEN_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)
QUEUE_LENGTH_BUCKETS = (0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
BASE_LABELS = ("service", "model", "node")


def route_label(path: str) -> str:
    """The bounded ``route`` value of a request path."""
    return path if path in ROUTES else OTHER


class _LevelsCollector(Collector):
    """Gauges read from the admission controller at scrape time."""

    def __init__(self, metrics: GatewayMetrics, controller: AdmissionController) -> None:
        self._metrics = metrics
        self._controller = controller

    def describe(self) -> Iterable[GaugeMetricFamily]:
        return self.collect()

    def collect(self) -> Iterator[GaugeMetricFamily]:
        labels = self._metrics.base_labels(self._metrics.primary_model)
        limits = self._controller.limits
        for name, doc, value in (
            (
                "oximeter_queue_length",
                "Requests waiting in the gateway queue.",
                self._controller.queue_length,
            ),
            ("oximeter_queue_limit", "Bound of the gateway queue.", limits.max_queue),
            (
                "oximeter_inflight_requests",
                "Requests admitted upstream and not finished.",
                self._controller.inflight,
            ),
            (
                "oximeter_concurrency_limit",
                "Most requests admitted upstream at once.",
                limits.max_concurrency,
            ),
            # A stuck queue or engine finishes no request, so no histogram sees it: these ages do.
            (
                "oximeter_queue_oldest_wait_seconds",
                "How long the oldest request in the gateway queue has waited (0: none queued).",
                self._controller.oldest_queued_s(),
            ),
            (
                "oximeter_upstream_oldest_unanswered_seconds",
                "How long ago the oldest admitted request still without the engine's first byte was "
                "admitted (0: none).",
                self._controller.oldest_unanswered_s(),
            ),
        ):
            family = GaugeMetricFamily(name, doc, labels=BASE_LABELS)
            family.add_metric(labels, value)
            yield family
        info = GaugeMetricFamily(
            "oximeter_target_info", "Which service and model run on which node.", labels=BASE_LABELS
        )
        for model in self._metrics.models or [OTHER]:
            info.add_metric(self._metrics.base_labels(model), 1)
        yield info


class GatewayMetrics:
    """All gateway series in their own ``CollectorRegistry`` (no global default registry)."""

    def __init__(
        self, service: str, node: str, models: Sequence[str], controller: AdmissionController
    ) -> None:
        self.service = service
        self.node = node
        self.models: list[str] = []
        self._allowed: set[str] = set()
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        queue_buckets = sorted({*QUEUE_LENGTH_BUCKETS, controller.limits.max_queue})
        self.queue_length_at_enqueue = Histogram(
            "oximeter_queue_length_at_enqueue",
            "Queue length each admitted request joined at (0 = straight upstream).",
            BASE_LABELS,
            buckets=queue_buckets,
            registry=r,
        )
        self.queue_wait = Histogram(
            "oximeter_queue_wait_seconds",
            "Time from arrival to admission upstream, or to leaving the queue unserved (the client "
            "went away).",
            BASE_LABELS,
            buckets=QUEUE_WAIT_BUCKETS_S,
            registry=r,
        )
        self.requests = Counter(
            "oximeter_requests_total",
            "Requests answered, by route and status code (499: the client went away).",
            (*BASE_LABELS, "route", "code"),
            registry=r,
        )
        self.duration = Histogram(
            "oximeter_request_duration_seconds",
            "Arrival to last byte sent.",
            (*BASE_LABELS, "route"),
            buckets=LATENCY_BUCKETS_S,
            registry=r,
        )
        self.ttft = Histogram(
            "oximeter_time_to_first_token_seconds",
            "Arrival to the first streamed chunk (streamed answers only).",
            BASE_LABELS,
            buckets=LATENCY_BUCKETS_S,
            registry=r,
        )
        self.inter_token = Histogram(
            "oximeter_inter_token_seconds",
            "Gap between streamed chunks.",
            BASE_LABELS,
            buckets=INTER_TOKEN_BUCKETS_S,
            registry=r,
        )
        self.output_tokens = Counter(
            "oximeter_output_tokens", "Generated tokens passed to clients.", BASE_LABELS, registry=r
        )
        self.upstream_duration = Histogram(
            "oximeter_upstream_duration_seconds",
            "Admission to end of the upstream response.",
            BASE_LABELS,
            buckets=LATENCY_BUCKETS_S,
            registry=r,
        )
        self.rejected = Counter(
            "oximeter_rejected_requests",
            "Requests refused by the gateway, by reason.",
            (*BASE_LABELS, "reason"),
            registry=r,
        )
        self.aborts = Counter(
            "oximeter_upstream_aborts",
            "Upstream requests the gateway aborted, by reason.",
            (*BASE_LABELS, "reason"),
            registry=r,
        )
        self.completions = Counter(
            "oximeter_completions",
            "Answers the engine completed (status 200), by the finish reason it reported "
            "(other: none or an unknown one).",
            (*BASE_LABELS, "finish_reason"),
            registry=r,
        )
        self.empty_completions = Counter(
            "oximeter_empty_completions",
            "Completed answers that carried no text and no tool-call arguments.",
            BASE_LABELS,
            registry=r,
        )
        self.stream_errors = Counter(
            "oximeter_stream_errors",
            "Streamed answers that failed after their head was sent, by reason.",
            (*BASE_LABELS, "reason"),
            registry=r,
        )
        self.retried = Counter(
            "oximeter_retried_requests",
            "Requests re-sent within seconds: their Idempotency-Key (else client-chosen X-Request-ID) "
            "was seen on this gateway within its retry window.",
            (*BASE_LABELS, "route"),
            registry=r,
        )
        r.register(_LevelsCollector(self, controller))
        self._series: dict[str, ModelSeries] = {}
        self.add_models(models)
        self._init_zero(OTHER)

    def series(self, model: str) -> ModelSeries:
        """The cached children of ``model`` (an already bounded label value)."""
        found = self._series.get(model)
        if found is None:
            found = self._series[model] = ModelSeries(self, model)
        return found

    @property
    def primary_model(self) -> str:
        """The model the per-gateway gauges are labelled with."""
        return self.models[0] if self.models else OTHER

    def base_labels(self, model: str) -> tuple[str, str, str]:
        """``(service, model, node)`` label values."""
        return (self.service, model, self.node)

    def model_label(self, model: object) -> str:
        """The bounded ``model`` value of a request's ``model`` field."""
        return model if isinstance(model, str) and model in self._allowed else OTHER

    def add_models(self, models: Iterable[str]) -> None:
        """Extend the allow-list (e.g. from the upstream's ``/v1/models``) and start its counters at 0."""
        for model in models:
            if model not in self._allowed and model != OTHER:
                self._allowed.add(model)
                self.models.append(model)
                self._init_zero(model)

    def _init_zero(self, model: str) -> None:
        base = self.base_labels(model)
        for route in (*ROUTES, OTHER):
            for code in KNOWN_CODES:
                self.requests.labels(*base, route, code)
        for reason in REJECT_REASONS:
            self.rejected.labels(*base, reason)
        for reason in ABORT_REASONS:
            self.aborts.labels(*base, reason)
        for reason in STREAM_ERROR_REASONS:
            self.stream_errors.labels(*base, reason)
        for reason in (*FINISH_REASONS, OTHER_FINISH):
            self.completions.labels(*base, reason)
        self.output_tokens.labels(*base)
        self.empty_completions.labels(*base)
        for route in (*ROUTES, OTHER):
            self.retried.labels(*base, route)


class ModelSeries:
    """One model's children, looked up once: ``labels()`` costs microseconds on every call."""

    def __init__(self, metrics: GatewayMetrics, model: str) -> None:
        base = metrics.base_labels(model)
        self._metrics = metrics
        self._base = base
        self.queue_length_at_enqueue = metrics.queue_length_at_enqueue.labels(*base)
        self.queue_wait = metrics.queue_wait.labels(*base)
        self.ttft = metrics.ttft.labels(*base)
        self.inter_token = metrics.inter_token.labels(*base)
        self.output_tokens = metrics.output_tokens.labels(*base)
        self.upstream_duration = metrics.upstream_duration.labels(*base)
        self._empty = metrics.empty_completions.labels(*base)
        self._finished: dict[str, Any] = {}
        self._answers: dict[tuple[str, int], tuple[Any, Any]] = {}

    def answered(self, route: str, code: int, duration_s: float) -> None:
        """Count one answer and observe its duration."""
        pair = self._answers.get((route, code))
        if pair is None:
            pair = (
                self._metrics.requests.labels(*self._base, route, str(code)),
                self._metrics.duration.labels(*self._base, route),
            )
            self._answers[(route, code)] = pair
        pair[0].inc()
        pair[1].observe(duration_s)

    def rejected(self, reason: str) -> None:
        """Count one refusal."""
        self._metrics.rejected.labels(*self._base, reason).inc()

    def aborted(self, reason: str) -> None:
        """Count one upstream abort."""
        self._metrics.aborts.labels(*self._base, reason).inc()

    def completed(self, finish_reason: bytes | None, *, empty: bool) -> str:
        """Count one completed answer by its finish reason; returns the reason's label value."""
        label = finish_label(finish_reason)
        child = self._finished.get(label)
        if child is None:
            child = self._finished[label] = self._metrics.completions.labels(*self._base, label)
        child.inc()
        if empty:
            self._empty.inc()
        return label

    def stream_failed(self, reason: str) -> None:
        """Count one stream that failed after its head was sent."""
        self._metrics.stream_errors.labels(*self._base, reason).inc()
