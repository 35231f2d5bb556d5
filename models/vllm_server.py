"""vLLM's OpenAI-compatible server on loopback, started and stopped by the caller: the real-server tests and
``bench/engines.py`` (optional extra: vLLM in its own environment, docs/engines.md#vllm-on-cpu).

``vllm serve`` fails in the CPU package (no ``vllm`` distribution metadata); ``python -m
vllm.entrypoints.openai.api_server`` works. The server gets a free port on 127.0.0.1 only, its own process group (its
engine-core children stop with it), and is stopped by its pid on exit.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from veracity.models.vllm_engine import platform_defaults


def server_flags(options: dict[str, Any]) -> list[str]:
    """vLLM arguments as ``api_server`` flags: ``{"enforce_eager": True}`` -> ``--enforce-eager``,
    ``{"enable_chunked_prefill": False}`` -> ``--no-enable-chunked-prefill``, ``{"max_num_seqs": 8}`` ->
    ``--max-num-seqs 8``."""
    flags = []
    for key, value in options.items():
        flag = f"--{key.replace('_', '-')}"
        flags += [flag] if value is True else [f"--no-{flag[2:]}"] if value is False else [flag, str(value)]
    return flags


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def vllm_server(folder: str | Path, name: str, log_path: Path, *, dtype: str = "float32",
                max_model_len: int | None = 2048,
                extra_args: Sequence[str] = ("--enforce-eager",), env: dict[str, str] | None = None,
                start_seconds: float = 300.0) -> Iterator[str]:
    """Serve the model ``folder`` as ``name`` on a free loopback port; yields the ``/v1`` URL once ``/health``
    answers.

    Args:
        log_path: the server's stdout and stderr.
        max_model_len: its context in tokens (None: the model's own; the KV cache of a CPU must hold it).
        extra_args: further ``api_server`` arguments (``--enforce-eager`` on a CPU).
        env: the server's environment (default: this process's); ``VLLM_ENABLE_V1_MULTIPROCESSING`` is removed, the
            server runs its engine core in its own process.
        start_seconds: how long to wait for ``/health`` (≈ 1 min alone on a 2-core CPU).

    Raises:
        RuntimeError: the server exited or did not answer in time (the end of its log attached).
    """
    port = free_port()
    command = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(folder),
               "--served-model-name", name, "--dtype", dtype, *extra_args, "--host", "127.0.0.1", "--port", str(port)]
    if max_model_len is not None:  # else the model's own context
        command += ["--max-model-len", str(max_model_len)]
    if not any("chunked-prefill" in arg for arg in extra_args):
        command += server_flags(platform_defaults())
    server_env = dict(os.environ if env is None else env)
    server_env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)
    with open(log_path, "w") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=server_env,
                                start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + start_seconds
        while True:
            try:
                if urllib.request.urlopen(f"{url}/health", timeout=2).status == 200:
                    break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"vLLM's server did not come up: {Path(log_path).read_text()[-3000:]}")
            time.sleep(1)
        yield f"{url}/v1"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the group this process started
            proc.wait(timeout=10)
