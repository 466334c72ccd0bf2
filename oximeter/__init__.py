"""Oximeter: observability and layer-attributed alerting for GPU LLM inference services."""

__version__ = "0.1.0"
