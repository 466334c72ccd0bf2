"""A real engine's first batches are its slowest (memory allocated, kernels chosen for each new
shape): seconds without a token on a busy CPU host, which a demo's compressed clock would read as
the engine hanging. The stack sends each engine a few full batches of traffic-sized requests before
anything watches it, as a serving platform warms a replica before putting it in rotation."""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor

import requests

from stack.vllm.engine import EngineError, EngineSpec, VllmEngine

# A prompt about as long as the longest the demo's traffic sends engines on CPUs.
PROMPT_WORDS = 120
ANSWER_TOKENS = 24
ROUNDS = 2


def warm_up(engines: Mapping[str, VllmEngine], spec: EngineSpec, timeout_s: float = 300.0) -> None:
    """``ROUNDS`` full batches (``max_num_seqs`` requests at once) per engine, every engine at once;
    an engine that fails a request fails the warm-up."""
    # The tiny model's byte-level tokens: a few per word, so a short context gets a shorter prompt.
    words = " ".join(f"word{i % 97}" for i in range(min(PROMPT_WORDS, spec.max_model_len // 8)))

    def ask(url: str) -> None:
        body = {"model": spec.served_model_name, "max_tokens": ANSWER_TOKENS,
                "messages": [{"role": "user", "content": words}]}
        try:
            requests.post(f"{url}/v1/chat/completions", json=body, timeout=timeout_s).raise_for_status()
        except requests.RequestException as exc:
            raise EngineError(f"warming up {url}: {exc}") from None

    urls = [engine.url for engine in engines.values()]
    with ThreadPoolExecutor(max_workers=spec.max_num_seqs * max(1, len(urls))) as pool:
        for _ in range(ROUNDS):
            list(pool.map(ask, [url for url in urls for _ in range(spec.max_num_seqs)]))
