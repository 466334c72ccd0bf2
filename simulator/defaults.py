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
# The gateway limits the simulated fleets' traffic is sized for (12 of the engine's 16 batch slots,
# up to 10 s of queueing), run by the local stacks, their backfilled history and generated sweeps;
# the product's own defaults (gateway/settings.py) are stricter, and at a simulated evening peak
# they would reject requests and burn the fleet's error budget.
FLEET_GATEWAY: dict[str, float] = {"max_concurrency": 12, "max_queue_wait_s": 10.0}
