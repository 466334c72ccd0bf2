"""One real vLLM engine (the CPU build) as a child process: started, polled until it serves, stopped.

``python -m vllm.entrypoints.openai.api_server`` from vLLM's own environment (``stack/vllm/env.py``)
serves the tiny generated model with dummy weights. The API server binds its socket itself before
the engine loads (``vllm/entrypoints/launchers/launcher.py``, ``setup_server``), so it is given port 0
and the port it got is read from the kernel: the one TCP socket the API server process listens on
once it serves (it logs the port it was given, 0, not the one it got). The engine core (the
scheduler and the model) runs in a child process titled ``VLLM::EngineCore``: that is the process a
hung or crashed engine is made of, while the API server in front of it still answers.
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass, field, replace
from pathlib import Path

import psutil
import requests

from oximeter.errors import OximeterError
from stack.procs import ManagedProcess, ProcessError, wait_until
from stack.vllm.env import ensure_env, ensure_model, env_python

HOST = "127.0.0.1"
ENGINE_CORE_TITLE = "VLLM::EngineCore"


class EngineError(OximeterError):
    """The engine did not come up, or a process it should have is missing."""


@dataclass(frozen=True)
class EngineSpec:
    """How the engine is started: vLLM's flags and the CPU build's KV-cache size."""

    served_model_name: str = "tiny-llama"
    max_model_len: int = 512
    max_num_seqs: int = 8
    # VLLM_CPU_KVCACHE_SPACE, in GiB: the CPU build's KV pool (its GPU build sizes the pool from
    # --gpu-memory-utilization instead).
    kv_cache_space_gib: int = 1
    # --num-gpu-blocks-override: a pool this many blocks long whatever the space (a small pool
    # makes the scheduler preempt under load).
    num_blocks: int | None = None
    # How long the engine may take to load and warm up before it is declared failed: minutes on a
    # shared 2-core machine (it compiles and profiles at start).
    start_timeout_s: float = 900.0
    extra_args: tuple[str, ...] = field(default=())
    # VLLM_CPU_OMP_THREADS_BIND: the CPUs its model threads run on. "auto" binds every engine of a
    # host to the same first cores, so engines side by side would share them (launch_fleet spreads them).
    omp_cpus: str = "auto"
    # Scheduling niceness of the engine's processes (``ManagedProcess``): an engine sharing a small
    # host with timing-sensitive work (a test suite's other stacks) yields the CPU to it.
    niceness: int = 0

    def argv(self, python: Path, model: Path, port: int = 0) -> list[str]:
        """The API server's command line (port 0: the kernel picks one)."""
        args = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
                "--served-model-name", self.served_model_name, "--host", HOST, "--port", str(port),
                "--load-format", "dummy", "--dtype", "float32", "--max-model-len", str(self.max_model_len),
                "--max-num-seqs", str(self.max_num_seqs), "--disable-uvicorn-access-log",
                # No torch.compile warm-up: two minutes on a loaded 2-core machine, for a model whose
                # speed means nothing. (The CPU build runs the model in a worker process of its own
                # whatever --distributed-executor-backend says: vllm/platforms/cpu.py.)
                "--enforce-eager"]
        if self.num_blocks is not None:
            args += ["--num-gpu-blocks-override", str(self.num_blocks)]
        return [*args, *self.extra_args]

    def env(self, vllm_env: Path) -> dict[str, str]:
        """The engine's environment: vLLM's interpreter, its own bytecode, the KV pool's size."""
        return {"VLLM_CPU_KVCACHE_SPACE": str(self.kv_cache_space_gib), "VIRTUAL_ENV": str(vllm_env),
                # Oximeter's bytecode folder is per checkout; vLLM's lives in its cached environment.
                "PYTHONPYCACHEPREFIX": str(vllm_env / "pycache"),
                # Nothing to fetch: the model is a local folder and there is no network to a hub.
                "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1",
                "DO_NOT_TRACK": "1", "VLLM_CPU_OMP_THREADS_BIND": self.omp_cpus}


def listening_port(pid: int, host: str = HOST) -> int | None:
    """The one TCP port process ``pid`` listens on at ``host``, or None while it listens on none."""
    try:
        conns = psutil.Process(pid).net_connections(kind="tcp")
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None
    ports = {c.laddr.port for c in conns if c.status == psutil.CONN_LISTEN and c.laddr.ip == host}
    if len(ports) > 1:
        raise EngineError(f"process {pid} listens on several ports: {sorted(ports)}")
    return ports.pop() if ports else None


class VllmEngine:
    """``with VllmEngine(name, env, model, log_dir) as engine:`` serves at ``engine.url``, then stops.

    ``port`` 0 (the default) lets the kernel pick the port. A restart keeps the port the engine had,
    as a container restarted in its pod keeps its address: give a port reserved for the engine's
    whole life (``stack.ports.reserve_port``, outside the range the kernel hands out) when it will
    be restarted, so that nothing else can take it while the engine is down.
    """

    def __init__(self, name: str, vllm_env: Path, model: Path, log_dir: Path,
                 spec: EngineSpec | None = None, port: int = 0) -> None:
        self.name = name
        self.spec = spec or EngineSpec()
        self.vllm_env = vllm_env
        self.model = model
        self.proc = ManagedProcess(name, self.spec.argv(env_python(vllm_env), model, port), log_dir,
                                   env=self.spec.env(vllm_env), niceness=self.spec.niceness)
        self.url = ""

    def launch(self) -> VllmEngine:
        """Start the process without waiting (engines of a fleet load side by side)."""
        self.proc.start()
        return self

    def start(self) -> VllmEngine:
        """Start and wait until ``/v1/models`` lists the model (the engine core answers through it)."""
        self.launch()
        try:
            self.wait_serving(self.spec.start_timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def wait_serving(self, timeout_s: float) -> None:
        """Poll until the API server listens and lists the model; fails early if it exits."""
        pid = self._pid()
        self.proc.wait_ready(lambda: listening_port(pid), timeout_s)
        self.url = f"http://{HOST}:{listening_port(pid)}"
        self.proc.wait_ready(self._lists_model, timeout_s)

    def restart(self) -> VllmEngine:
        """Start the API server again on its port once it has exited (a crashed engine core takes
        it down), and wait until it serves; its log goes on in the same file."""
        if self.running or not self.url:
            raise EngineError(f"{self.name} is running or was never started")
        port = int(self.url.rsplit(":", 1)[1])
        self.proc.stop()
        self.proc.argv = self.spec.argv(env_python(self.vllm_env), self.model, port)
        return self.start()

    def _lists_model(self) -> bool:
        reply = requests.get(f"{self.url}/v1/models", timeout=5)
        return reply.ok and any(m.get("id") == self.spec.served_model_name for m in reply.json()["data"])

    def _pid(self) -> int:
        if self.proc.proc is None:
            raise EngineError(f"{self.name} is not started")
        return self.proc.proc.pid

    def engine_core_pid(self) -> int:
        """The engine core's process (the scheduler and the model), a child of the API server."""
        def find() -> int:
            for child in psutil.Process(self._pid()).children(recursive=True):
                try:
                    if ENGINE_CORE_TITLE in " ".join(child.cmdline()):
                        return int(child.pid)
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    continue
            return 0
        try:
            return int(wait_until(find, 30.0, interval_s=0.2, what=f"{self.name}'s engine core"))  # type: ignore[call-overload]
        except TimeoutError as exc:
            raise EngineError(str(exc)) from None

    def signal_engine_core(self, sig: int) -> int:
        """Send ``sig`` to the engine core only (SIGSTOP hangs it, SIGKILL crashes it); its pid."""
        pid = self.engine_core_pid()
        os.kill(pid, sig)
        return pid

    def metrics(self) -> str:
        """vLLM's own ``/metrics`` text."""
        reply = requests.get(f"{self.url}/metrics", timeout=10)
        reply.raise_for_status()
        return reply.text

    @property
    def running(self) -> bool:
        """True while the API server process has not exited."""
        return self.proc.running

    def stop(self) -> int | None:
        """Stop the API server and its engine core (their process group); a stopped core is resumed
        first so that it can exit on SIGTERM rather than wait out the kill."""
        if self.proc.running:
            self.proc.signal(signal.SIGCONT)
        try:
            return self.proc.stop()
        except ProcessError:
            return None

    def log_tail(self, lines: int = 40) -> str:
        """The engine's last log lines, for failure messages."""
        return self.proc.log_tail(lines)

    def __enter__(self) -> VllmEngine:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def launch_fleet(nodes: list[str], spec: EngineSpec, log_dir: Path, engines: dict[str, VllmEngine],
                 started: list[ManagedProcess]) -> None:
    """One engine per node into ``engines``, loading side by side, each process added to ``started``
    as it starts (so a caller that stops ``started`` on a failure stops them); returns once all serve."""
    env = ensure_env()
    model = ensure_model(env)
    cpus = os.cpu_count() or 1
    for i, node in enumerate(nodes):
        # One CPU each where the host has one per engine: an engine catching up on a backlog then
        # slows no other (with "auto" they would all compute on CPU 0).
        own = replace(spec, omp_cpus=str(i)) if spec.omp_cpus == "auto" and 1 < len(nodes) <= cpus else spec
        engines[node] = VllmEngine(f"vllm-{node}", env, model, log_dir, own).launch()
        started.append(engines[node].proc)
    for engine in engines.values():
        engine.wait_serving(spec.start_timeout_s)
