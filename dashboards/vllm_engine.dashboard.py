# ruff: noqa: N999 - `<name>.dashboard.py` is grafanalib's naming; the builder loads these by path.
"""vLLM engine: scheduler state, KV cache, preemptions, prefix cache, latency, process RSS (leaks)."""

from dashboards.panels import NODE, heatmap, make_dashboard, timeseries, variables

dashboard = make_dashboard(
    title="Oximeter / vLLM engine",
    uid="oximeter-vllm-engine",
    description="Running and waiting requests, KV cache, preemptions, prefix cache, TTFT/ITL/E2E.",
    templating=variables("node", node_source="vllm:num_requests_running"),
    panels=[
        timeseries("Requests running / waiting",
                   [(f"sum by (node, model_name) (vllm:num_requests_running{{{NODE}}})",
                     "running {{node}} {{model_name}}"),
                    (f"sum by (node, model_name) (vllm:num_requests_waiting{{{NODE}}})",
                     "waiting {{node}} {{model_name}}")]),
        timeseries("KV cache usage",
                   [(f"node_model:vllm_kv_cache_usage:ratio{{{NODE}}}", "{{node}} {{model}}")],
                   unit="percentunit", max_value=1),
        timeseries("Preemptions",
                   [(f"node_model:vllm_num_preemptions:rate5m{{{NODE}}}", "{{node}} {{model}}")], unit="ops"),
        timeseries("Prefix cache hit ratio",
                   [(f"node_model:vllm_prefix_cache_hit:ratio_5m{{{NODE}}}", "{{node}} {{model}}")],
                   unit="percentunit", max_value=1),
        timeseries("TTFT p50 / p99",
                   [(f"histogram_quantile(0.5, sum by (node, model_name, le) "
                     f"(rate(vllm:time_to_first_token_seconds_bucket{{{NODE}}}[$__rate_interval])))",
                     "p50 {{node}} {{model_name}}"),
                    (f"node_model:vllm_time_to_first_token_seconds:p99_5m{{{NODE}}}",
                     "p99 {{node}} {{model}}")],
                   unit="s"),
        timeseries("Inter-token latency p50 / p99",
                   [(f"node_model:vllm_inter_token_latency_seconds:p50_5m{{{NODE}}}",
                     "p50 {{node}} {{model}}"),
                    (f"histogram_quantile(0.99, sum by (node, model_name, le) "
                     f"(rate(vllm:inter_token_latency_seconds_bucket{{{NODE}}}[$__rate_interval])))",
                     "p99 {{node}} {{model_name}}")],
                   unit="s"),
        timeseries("End-to-end latency p99 (context, not an SLO)",
                   [(f"node_model:vllm_e2e_request_latency_seconds:p99_5m{{{NODE}}}", "{{node}} {{model}}")],
                   unit="s"),
        timeseries("Engine queue time p99",
                   [(f"histogram_quantile(0.99, sum by (node, model_name, le) "
                     f"(rate(vllm:request_queue_time_seconds_bucket{{{NODE}}}[$__rate_interval])))",
                     "{{node}} {{model_name}}")], unit="s"),
        timeseries("Tokens per second",
                   [(f"sum by (node) (rate(vllm:prompt_tokens_total{{{NODE}}}[$__rate_interval]))",
                     "prompt {{node}}"),
                    (f"sum by (node) (rate(vllm:generation_tokens_total{{{NODE}}}[$__rate_interval]))",
                     "generation {{node}}")]),
        timeseries("Finished requests by reason",
                   [(f"sum by (node, finished_reason) "
                     f"(rate(vllm:request_success_total{{{NODE}}}[$__rate_interval]))",
                     "{{node}} {{finished_reason}}")], unit="reqps"),
        timeseries("Inference process RSS (leaks)",
                   [(f"max by (node, process) (oximeter_process_resident_memory_bytes{{{NODE}}})",
                     "{{node}} {{process}}")], unit="bytes"),
        heatmap("TTFT distribution",
                (f"sum by (le) (rate(vllm:time_to_first_token_seconds_bucket{{{NODE}}}[$__rate_interval]))",
                 "{{le}}")),
    ],
)
