# ruff: noqa: N999 - `<name>.dashboard.py` is grafanalib's naming; the builder loads these by path.
"""Dependencies: vector DB / cache latency and hit ratio next to the queue they back up."""

from dashboards.panels import GATEWAY, NODE, heatmap, make_dashboard, timeseries, variables

dashboard = make_dashboard(
    title="Oximeter / Dependencies",
    uid="oximeter-dependencies",
    description="Dependency latency and cache hit ratio; a falling hit ratio backs the queue up while "
                "GPUs idle.",
    templating=variables("service", "node"),
    panels=[
        timeseries("Dependency latency p50 / p99",
                   [(f"histogram_quantile(0.5, sum by (node, dependency, le) "
                     f"(rate(oximeter_dependency_duration_seconds_bucket{{{NODE}}}[$__rate_interval])))",
                     "p50 {{node}} {{dependency}}"),
                    (f"dependency:oximeter_dependency_duration_seconds:p99_5m{{{NODE}}}",
                     "p99 {{node}} {{dependency}}")], unit="s"),
        timeseries("Cache hit ratio",
                   [(f"cache:oximeter_cache_requests_hit:ratio_5m{{{NODE}}}",
                     "{{node}} {{cache}}")], unit="percentunit", max_value=1),
        timeseries("Cache lookups by result",
                   [(f"sum by (node, cache, result) "
                     f"(rate(oximeter_cache_requests_total{{{NODE}}}[$__rate_interval]))",
                     "{{node}} {{cache}} {{result}}")], unit="ops"),
        heatmap("Dependency latency distribution",
                (f"sum by (le) "
                 f"(rate(oximeter_dependency_duration_seconds_bucket{{{NODE}}}[$__rate_interval]))",
                 "{{le}}")),
        timeseries("Queue wait p99 (what a slow dependency backs up)",
                   [(f"service_node:oximeter_queue_wait_seconds:p99_5m{{{GATEWAY}}}",
                     "{{service}} {{node}}")],
                   unit="s"),
        timeseries("GPU utilisation p95 by node (falls while the dependency is slow)",
                   [(f"node:oximeter_gpu_utilization_ratio:avg_p95_5m{{{NODE}}}", "{{node}}")],
                   unit="percentunit"),
    ],
)
