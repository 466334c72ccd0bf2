"""Load for a real vLLM engine, and its ``/metrics`` read back: what the real-engine tests and the
capture recorder share.

Requests ask for ``ignore_eos`` and a fixed length, so each one occupies a sequence slot for a known
number of decode steps whatever the (random) dummy weights generate.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import requests
from real_exposition import read

from stack.vllm.engine import EngineSpec, VllmEngine

# Long enough that a full batch decodes for seconds on this CPU, short enough to fit --max-model-len.
LONG_TOKENS = 400
# With the prompt (about 30 tokens), one of the CPU build's 128-token KV blocks: a sequence that never
# grows a second block, so a full batch of them never runs the tests' pool out and never preempts.
SHORT_TOKENS = 64
# The tests' engine: vLLM's flags as docs/real-vllm.md gives them, and a KV pool of 16 blocks (the CPU
# build's blocks hold 128 tokens): a full batch of LONG_TOKENS requests needs twice that, while any
# one request fits (--max-model-len 512 is 4 blocks).
# Niceness 10: the suite runs the engine beside other workers' live stacks, whose fault-free soaks
# must not see their simulator starved of CPU by an engine loading or spinning between batches.
SPEC = EngineSpec(num_blocks=16, niceness=10)
# Polling deadlines for what the engine shows within a few of its steps (milliseconds each): long
# enough for a loaded 2-core machine, and a miss fails with what was seen.
SEE_S = 60.0


def completion(url: str, model: str, max_tokens: int = LONG_TOKENS, timeout_s: float = 600.0) -> int:
    """One streamed chat completion of exactly ``max_tokens`` tokens; its HTTP status (0: no answer)."""
    body = {"model": model, "messages": [{"role": "user", "content": "tell me about queues"}],
            "max_tokens": max_tokens, "ignore_eos": True, "stream": True}
    try:
        with requests.post(f"{url}/v1/chat/completions", json=body, stream=True, timeout=timeout_s) as reply:
            for _ in reply.iter_lines():
                pass
            return reply.status_code
    except requests.RequestException:
        return 0


@dataclass
class Load:
    """``n`` concurrent requests running in threads; ``statuses`` fills as they finish."""

    url: str
    model: str
    n: int
    max_tokens: int = LONG_TOKENS
    statuses: list[int] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _one(self) -> None:
        status = completion(self.url, self.model, self.max_tokens)
        with self._lock:
            self.statuses.append(status)


@contextlib.contextmanager
def load(engine: VllmEngine, n: int, max_tokens: int = LONG_TOKENS, via: str | None = None) -> Iterator[Load]:
    """Run ``n`` requests at once (to the engine, or ``via`` a gateway in front of it) while the
    block runs; waits for them all at its end."""
    running = Load(via or engine.url, engine.spec.served_model_name, n, max_tokens)
    with ThreadPoolExecutor(max_workers=n) as pool:
        for _ in range(n):
            pool.submit(running._one)
        yield running


@contextlib.contextmanager
def sustained(url: str, model: str, n: int, max_tokens: int = LONG_TOKENS) -> Iterator[Load]:
    """Keep ``n`` requests in flight at ``url`` while the block runs (each thread sends its next
    request as its last one ends: the load is a concurrency, whatever the machine's speed); at its
    end no new request starts and those in flight finish."""
    running = Load(url, model, n, max_tokens)
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            running._one()
    with ThreadPoolExecutor(max_workers=n) as pool:
        for _ in range(n):
            pool.submit(loop)
        try:
            yield running
        finally:
            stop.set()


def samples(engine: VllmEngine) -> dict[str, float]:
    """The engine's ``vllm:`` samples by name (one engine, one model: no two share a name but for
    labelled families, whose samples are summed)."""
    return summed(engine.metrics(), "vllm:")


def summed(text: str, prefix: str, **match: str) -> dict[str, float]:
    """The samples of an exposition whose names start with ``prefix`` and whose labels include
    ``match``, summed by name (histogram buckets left out)."""
    out: dict[str, float] = {}
    for s in read(text)[1]:
        labels = dict(s.labels)
        wanted = all(labels.get(k) == v for k, v in match.items())
        if s.name.startswith(prefix) and "le" not in labels and wanted:
            out[s.name] = out.get(s.name, 0.0) + s.value
    return out
