"""The simulated fleet's defaults, in one place: ``oximeter sim serve``'s settings, scenario files,
histories and the local stacks (the demo, the end-to-end tests) all read them.

The engine's timing and capacity are ``EngineParams``' defaults (``simulator/engine.py``); the
gateway in front of each engine is the product's (``gateway/settings.py``). What differs on
purpose says so where it differs: a history's coarser engine iterations in
``simulator/scenario.py``, a scenario's own gateway limits in its file.
"""

from __future__ import annotations

from simulator.engine import EngineParams

ENGINE = EngineParams()
NODES = 2
GPUS_PER_NODE = 4
# Fewer GPUs per node on a local stack: its backfilled history and its scrapes stay light.
STACK_GPUS_PER_NODE = 2
MODEL = "sim-llama-3-8b"
SERVICE = "chat"
# Seconds a request waits on the simulated vector DB when its response cache misses (0 switches
# the step off).
DEPENDENCY_LATENCY_S = 0.03
