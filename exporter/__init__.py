"""GPU (NVML or simulated) and external queue exporter."""
