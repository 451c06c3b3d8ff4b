"""A real `specserve serve` subprocess on a free loopback port, for the server tests."""
from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
TESTS = Path(__file__).resolve().parents[1]

# registers the test-only proposers, then runs the normal command line
WITH_TEST_PROPOSERS = (
    "import sys; sys.path.insert(0, {tests!r}); from support import proposers as p; "
    "from specserve.speculative import registry; registry.REGISTRY[p.FaultyForTrigger.name] = p.FaultyForTrigger; "
    "registry.REGISTRY[p.SlowForTrigger.name] = p.SlowForTrigger; "
    "from specserve.cli import main; sys.exit(main(sys.argv[1:]))"
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    def __init__(self, model: Path, log_path: Path, *args: str, test_proposers: bool = False,
                 api_key: str | None = None, command: str = "serve"):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self.api_key = api_key
        cmd = [sys.executable]
        cmd += ["-c", WITH_TEST_PROPOSERS.format(tests=str(TESTS))] if test_proposers else ["-m", "specserve"]
        cmd += [command, "-m", str(model), "--port", str(self.port), *args]
        if api_key:
            cmd += ["--api-key", api_key]
        env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
        self.log_file = open(log_path, "w")
        self.proc = subprocess.Popen(cmd, stdout=self.log_file, stderr=subprocess.STDOUT, env=env)

    def ready(self, timeout: float = 90.0) -> "ServerProcess":
        """Wait until /health answers (servers started together load in parallel)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log()}")
            try:
                if httpx.get(self.url + "/health", timeout=1).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"server did not become healthy in {timeout} s:\n{self.log()}")

    def log(self) -> str:
        self.log_file.flush()
        return self.log_path.read_text()

    def headers(self) -> dict:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def get(self, path: str, **kw) -> httpx.Response:
        return httpx.get(self.url + path, headers=kw.pop("headers", self.headers()), timeout=60, **kw)

    def post(self, path: str, json=None, **kw) -> httpx.Response:
        return httpx.post(self.url + path, json=json, headers=kw.pop("headers", self.headers()), timeout=60, **kw)

    def openai(self, **kw):
        import openai
        return openai.OpenAI(base_url=self.url + "/v1", api_key=self.api_key or "none", max_retries=0, **kw)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log_file.close()


@contextlib.contextmanager
def running(procs: dict[str, ServerProcess]):
    """Servers started together (they load in parallel), all ready, all stopped afterwards."""
    try:
        for proc in procs.values():
            proc.ready()
        yield procs
    finally:
        for proc in procs.values():
            proc.stop()


def metric_values(text: str) -> dict[str, float]:
    """Prometheus text -> {'name{labels}': value} for every sample."""
    from prometheus_client.parser import text_string_to_metric_families
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
            out[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
    return out
