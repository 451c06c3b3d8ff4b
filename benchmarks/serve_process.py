"""A `specserve serve` subprocess on a free loopback port, for the benchmark scripts."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServeProcess:
    """`specserve serve -m MODEL --port P ARGS...` with its output in `log_path`."""

    def __init__(self, model: str | Path, args: list[str], log_path: Path):
        env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
        self.launch([sys.executable, "-m", "specserve", "serve", "-m", str(model), "--port", "{port}", *args],
                    log_path, env)

    def launch(self, command: list[str], log_path: Path, env: dict | None = None) -> None:
        """Start `command` ("{port}" replaced by a free port) with its output in log_path."""
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self.log = open(log_path, "w")
        command = [part.replace("{port}", str(self.port)) for part in command]
        self.proc = subprocess.Popen(command, stdout=self.log, stderr=subprocess.STDOUT, env=env)

    def wait(self, timeout: float = 300, warm_up: bool = True) -> str | None:
        """None once /health answers and, with warm_up, a short warm-up request is done (the first
        request of a process pays one-off costs), else why the server did not start (its error line).
        warm_up=False leaves the slots as they started (a session whose per-slot state matters)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.log.flush()
                lines = [ln for ln in self.log_path.read_text().splitlines() if ln.strip()]
                errors = [ln for ln in lines if ln.startswith("error:")]
                return (errors or lines or ["exited"])[-1]
            try:
                if httpx.get(self.url + "/health", timeout=1).status_code == 200:
                    if warm_up:
                        self.warm_up()
                    return None
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        return "did not become healthy in time"

    def warm_up(self) -> None:
        httpx.post(self.url + "/v1/completions", timeout=60, json={"prompt": "x = 1\n", "max_tokens": 4, "temperature": 0})

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


class LlamaServerProcess(ServeProcess):
    """llama.cpp's `llama-server -m GGUF --port P ARGS...` (LLAMACPP_BIN: the folder holding it)."""

    def __init__(self, llama_bin: Path, gguf: Path, args: list[str], log_path: Path):
        self.launch([str(llama_bin / "llama-server"), "-m", str(gguf), "--port", "{port}", "--no-warmup", *args],
                    log_path)

    def warm_up(self) -> None:
        httpx.post(self.url + "/completion", timeout=60, json={"prompt": "x = 1\n", "n_predict": 4, "temperature": 0})
