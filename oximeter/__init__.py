"""Oximeter: observability and layer-attributed alerting for GPU LLM inference services.

This package is the small core every process may import (errors, configuration, logs, vocabulary,
Xids, inputs, auth, secrets, the Prometheus client, the store); the code that starts whole stacks
and supervises processes lives in ``stack``, above every process.
"""

__version__ = "0.1.0"
