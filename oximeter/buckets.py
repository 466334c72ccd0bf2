"""Histogram bucket bounds of vLLM v1's latency series, for the simulator and the SLO checks.

vLLM registers them in ``PrometheusStatLogger`` (vllm-project/vllm, vllm/v1/metrics/loggers.py,
commit 005a810bc40faa25b8870fbc8559c3462581eee3): the simulator exposes the same bounds so its
quantiles have a real engine's resolution, and a latency SLO on stock telemetry can only count
requests against a threshold that is one of them. Standard library only.
"""

from __future__ import annotations

VLLM_TTFT_BUCKETS_S: tuple[float, ...] = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
    80.0, 160.0, 640.0, 2560.0,
)
VLLM_ITL_BUCKETS_S: tuple[float, ...] = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
)
# The end-to-end latency and the queue, prefill, decode and inference times share these bounds.
VLLM_REQUEST_LATENCY_BUCKETS_S: tuple[float, ...] = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0,
    960.0, 1920.0, 7680.0,
)
