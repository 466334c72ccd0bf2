"""Dependencies: vector DB / cache latency and hit ratio next to the queue they back up (seed 001 §5)."""

from dashboards.panels import GATEWAY, make_dashboard, heatmap, timeseries, variables

dashboard = make_dashboard(
    title="Oximeter / Dependencies",
    uid="oximeter-dependencies",
    description="Dependency latency and cache hit ratio; a falling hit ratio backs the queue up while "
                "GPUs idle.",
    templating=variables("service", "node"),
    panels=[
        timeseries("Dependency latency p50 / p99",
                   [("histogram_quantile(0.5, sum by (dependency, le) "
                     "(rate(oximeter_dependency_duration_seconds_bucket[$__rate_interval])))", "p50 {{dependency}}"),
                    ("dependency:oximeter_dependency_duration_seconds:p99_5m", "p99 {{dependency}}")], unit="s"),
        timeseries("Cache hit ratio",
                   [("cache:oximeter_cache_requests_hit:ratio_5m", "{{cache}}")], unit="percentunit", max_value=1),
        timeseries("Cache lookups by result",
                   [("sum by (cache, result) (rate(oximeter_cache_requests_total[$__rate_interval]))",
                     "{{cache}} {{result}}")], unit="ops"),
        heatmap("Dependency latency distribution",
                ("sum by (le) (rate(oximeter_dependency_duration_seconds_bucket[$__rate_interval]))", "{{le}}")),
        timeseries("Queue wait p99 (what a slow dependency backs up)",
                   [(f"service_node:oximeter_queue_wait_seconds:p99_5m{{{GATEWAY}}}", "{{service}} {{node}}")],
                   unit="s"),
        timeseries("GPU utilisation p95 by node (falls while the dependency is slow)",
                   [('node:oximeter_gpu_utilization_ratio:avg_p95_5m{node=~"$node"}', "{{node}}")],
                   unit="percentunit"),
    ],
)
