# ruff: noqa: N999 - `<name>.dashboard.py` is grafanalib's naming; the builder loads these by path.
"""GPU fleet: per node and GPU, the hardware signals (heat, clocks, ECC, Xid, NVLink) and a peer
comparison."""

from dashboards.panels import GPU, bargauge, make_dashboard, stat, table, timeseries, variables

dashboard = make_dashboard(
    title="Oximeter / GPU fleet",
    uid="oximeter-gpu-fleet",
    description="Temperature, clocks and throttle reasons, ECC, Xid, remaps, memory, power, peers.",
    templating=variables("node", "gpu", node_source="oximeter_gpu_up"),
    panels=[
        stat("GPUs up", [(f"sum(oximeter_gpu_up{{{GPU}}})", "up")]),
        stat("Utilisation spread (stddev of p95)",
             [(f"stddev(node_gpu:oximeter_gpu_utilization_ratio:p95_5m{{{GPU}}})", "stddev")],
             unit="percentunit", thresholds=[(None, "green"), (0.3, "yellow")]),
        stat("Uncorrectable ECC errors",
             [(f'sum(oximeter_gpu_ecc_errors_total{{{GPU}, kind="uncorrected"}})', "uncorrectable")],
             thresholds=[(None, "green"), (1, "red")]),
        stat("Row remaps pending", [(f"sum(oximeter_gpu_row_remap_pending{{{GPU}}})", "pending")],
             thresholds=[(None, "green"), (1, "orange")]),
        timeseries("Temperature",
                   [(f"max by (node, gpu) (oximeter_gpu_temperature_celsius{{{GPU}}})", "{{node}}/{{gpu}}")],
                   unit="celsius"),
        timeseries("SM clock / max clock",
                   [(f"node_gpu:oximeter_gpu_sm_clock:ratio_max{{{GPU}}}", "{{node}}/{{gpu}}")],
                   unit="percentunit"),
        timeseries("Throttle reasons active",
                   [(f'max by (node, gpu, reason) (oximeter_gpu_clock_event_active{{{GPU}, reason!="idle"}})',
                     "{{node}}/{{gpu}} {{reason}}")]),
        timeseries("Utilisation",
                   [(f"max by (node, gpu) (oximeter_gpu_utilization_ratio{{{GPU}}})", "{{node}}/{{gpu}}")],
                   unit="percentunit"),
        bargauge("Utilisation p95 vs same-model peers",
                 [(f"node_gpu:oximeter_gpu_utilization_ratio:p95_5m{{{GPU}}}"
                   " / on (gpu_model) group_left ()"
                   " avg by (gpu_model) (node_gpu:oximeter_gpu_utilization_ratio:p95_5m)",
                   "{{node}}/{{gpu}}")], unit="percentunit", max_value=2,
                 description="1.0 is the average of GPUs of the same model; an outlier with no throttle "
                             "reason is a peer_outlier."),
        bargauge("SM clock ratio vs same-model peers",
                 [(f"node_gpu:oximeter_gpu_sm_clock:ratio_max{{{GPU}}}"
                   " / on (gpu_model) group_left ()"
                   " avg by (gpu_model) (node_gpu:oximeter_gpu_sm_clock:ratio_max)",
                   "{{node}}/{{gpu}}")], unit="percentunit", max_value=2),
        timeseries("Corrected ECC errors in 5m",
                   [(f"node_gpu:oximeter_gpu_ecc_errors_corrected:increase5m{{{GPU}}}", "{{node}}/{{gpu}}")]),
        table("Xid errors by code",
              [(f"max by (node, gpu, xid) (oximeter_gpu_xid_errors_total{{{GPU}}})", "")]),
        timeseries("Remapped rows",
                   [(f"max by (node, gpu, kind) (oximeter_gpu_remapped_rows{{{GPU}}})",
                     "{{node}}/{{gpu}} {{kind}}")]),
        timeseries("PCIe replays",
                   [(f"sum by (node, gpu) (rate(oximeter_gpu_pcie_replay_total{{{GPU}}}[$__rate_interval]))",
                     "{{node}}/{{gpu}}")], unit="ops"),
        timeseries("PCIe throughput",
                   [(f"max by (node, gpu, direction) "
                     f"(oximeter_gpu_pcie_throughput_bytes_per_second{{{GPU}}})",
                     "{{node}}/{{gpu}} {{direction}}")], unit="Bps",
                   description="receive: host to GPU; transmit: GPU to host."),
        timeseries("NVLink errors in 5m, per link",
                   [(f"node_gpu_link:oximeter_gpu_nvlink_errors:increase5m{{{GPU}}}",
                     "{{node}}/{{gpu}} link {{link}}")],
                   description="CRC, replay and recovery errors together; a healthy link counts none."),
        timeseries("NVLink throughput sent, per link",
                   [(f"sum by (node, gpu, link) "
                     f"(rate(oximeter_gpu_nvlink_transmit_bytes_total{{{GPU}}}[$__rate_interval]))",
                     "{{node}}/{{gpu}} link {{link}}")], unit="Bps",
                   description="A degrading link carries less than its sibling links of the same GPU."),
        timeseries("Memory used",
                   [(f"node_gpu:oximeter_gpu_memory_used:ratio{{{GPU}}}", "{{node}}/{{gpu}}")],
                   unit="percentunit"),
        timeseries("Power vs limit",
                   [(f"max by (node, gpu) (oximeter_gpu_power_watts{{{GPU}}})", "power {{node}}/{{gpu}}"),
                    (f"max by (node, gpu) (oximeter_gpu_power_limit_watts{{{GPU}}})",
                     "limit {{node}}/{{gpu}}")],
                   unit="watt"),
        timeseries("Process GPU memory",
                   [(f"sum by (node, process) (oximeter_gpu_process_memory_used_bytes{{{GPU}}})",
                     "{{node}} {{process}}")], unit="bytes"),
        timeseries("Exporter collect duration and errors",
                   [('max by (node) (oximeter_exporter_collect_duration_seconds{node=~"$node"})',
                     "{{node}} duration"),
                    ('sum by (node, reason) (rate(oximeter_exporter_collect_errors_total{node=~"$node"}'
                     "[$__rate_interval]))", "{{node}} errors {{reason}}")]),
    ],
)
