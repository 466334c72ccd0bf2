# ruff: noqa: N999 - `<name>.dashboard.py` is grafanalib's naming; the builder loads these by path.
"""Overview: golden signals per service, SLO tiles (TTFT p99, availability), open incidents."""

from dashboards.panels import GATEWAY, bargauge, limit, make_dashboard, stat, timeseries, variables

# Availability = 2xx / all but 4xx client errors (a client's mistake is not downtime), over the range.
_AVAILABILITY = (
    f'sum(increase(oximeter_requests_total{{{GATEWAY}, code=~"2.."}}[$__range]))'
    f' / sum(increase(oximeter_requests_total{{{GATEWAY}, code!~"4.."}}[$__range]))'
)

dashboard = make_dashboard(
    title="Oximeter / Overview",
    uid="oximeter-overview",
    description="Is any service choking, and which layer? Golden signals, SLOs and open incidents.",
    templating=variables("service", "node"),
    panels=[
        stat(f"TTFT p99 (SLO {limit('ttft_p99_above_slo.slo')} s)",
             [(f"max(service_node:oximeter_time_to_first_token_seconds:p99_5m{{{GATEWAY}}})", "p99")],
             # Orange past the objective, red where TtftP99AboveSlo fires.
             unit="s", thresholds=[(None, "green"), (limit("ttft_p99_above_slo.slo"), "orange"),
                                   (limit("ttft_p99_above_slo.slo * 2"), "red")]),
        stat("Availability over the range", [(_AVAILABILITY, "availability")], unit="percentunit",
             thresholds=[(None, "red"), (0.99, "orange"), (0.999, "green")]),
        stat("Queue wait p99", [(f"max(service_node:oximeter_queue_wait_seconds:p99_5m{{{GATEWAY}}})",
                                 "p99")],
             # Orange past a healthy wait, red where the analyzer and GatewayQueueWaitHigh judge.
             unit="s",
             thresholds=[(None, "green"), (limit("healthy_queue_wait.threshold"), "orange"),
                         (limit("queue_wait_p99.threshold"), "red")]),
        stat("Open incidents", [("sum(oximeter_incidents_open)", "open")],
             thresholds=[(None, "green"), (1, "red")]),
        timeseries("Requests by code",
                   [(f"sum by (service, code) (rate(oximeter_requests_total{{{GATEWAY}}}[$__rate_interval]))",
                     "{{service}} {{code}}")], unit="reqps"),
        timeseries("5xx ratio",
                   [(f"sum by (service) "
                     f'(rate(oximeter_requests_total{{{GATEWAY}, code=~"5.."}}[$__rate_interval]))'
                     f" / sum by (service) (rate(oximeter_requests_total{{{GATEWAY}}}[$__rate_interval]))",
                     "{{service}}")], unit="percentunit"),
        timeseries("Latency: TTFT p99 and queue wait p99",
                   [(f"service_node:oximeter_time_to_first_token_seconds:p99_5m{{{GATEWAY}}}",
                     "TTFT {{service}} {{node}}"),
                    (f"service_node:oximeter_queue_wait_seconds:p99_5m{{{GATEWAY}}}",
                     "queue wait {{service}} {{node}}")], unit="s"),
        timeseries("Saturation: in-flight vs concurrency limit",
                   [(f"sum by (service, node) (oximeter_inflight_requests{{{GATEWAY}}})",
                     "in flight {{service}} {{node}}"),
                    (f"sum by (service, node) (oximeter_concurrency_limit{{{GATEWAY}}})",
                     "limit {{service}} {{node}}")]),
        bargauge("Open incidents by layer", [("sum by (layer) (oximeter_incidents_open)", "{{layer}}")],
                 max_value=10),
        timeseries("Alerting pipeline: outbox and notifications",
                   [("sum(oximeter_outbox_pending)", "outbox pending"),
                    ("sum by (channel, result) (rate(oximeter_notifications_total[$__rate_interval]))",
                     "{{channel}} {{result}}")]),
    ],
)
