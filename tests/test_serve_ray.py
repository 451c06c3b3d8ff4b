"""`specserve serve-ray`: 2 replicas behind Ray Serve on a local Ray cluster, against one
`specserve serve`: the same greedy outputs through the OpenAI client (streaming too), concurrent
requests spread over both replicas, a session stays on its replica, the combined metrics are the
sum of the replicas', and a killed replica is replaced while the other keeps serving."""
import concurrent.futures
import os
import subprocess
import sys
import time

import pytest

from support.server import ROOT, ServerProcess, metric_values, running

ray = pytest.importorskip("ray", reason="serve-ray needs the optional ray extra (pip install -e '.[ray]')")

pytestmark = [pytest.mark.server, pytest.mark.slow]

SPEC = ("--spec-type", "ngram-mod", "-t", "1", "-np", "2", "--metrics")
PROMPTS = ["def fibonacci(n):", "import os\n\ndef list_files(path):", "class Stack:\n    def __init__(self):",
           "for i in range(10):", "x = [1, 2, 3]\ny = x", "def add(a, b):\n    return"]
KILL_ONE_REPLICA = """
import ray
ray.init(address="auto", log_to_driver=False)
names = sorted(a["name"] for a in ray.util.list_named_actors(all_namespaces=True) if a["name"].startswith("SERVE_REPLICA::specserve#"))
victim = next(n for n in names if n.endswith("#" + {replica!r}))
ray.kill(ray.get_actor(victim, namespace="serve"), no_restart=True)
"""


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    from specserve.llm import BUNDLED_MODEL
    logs = tmp_path_factory.mktemp("ray-logs")
    procs = {"ray": ServerProcess(BUNDLED_MODEL, logs / "ray.log", *SPEC, "--replicas", "2", command="serve-ray"),
             "single": ServerProcess(BUNDLED_MODEL, logs / "single.log", *SPEC)}
    procs["ray"].ready = _ready_twice(procs["ray"])
    with running(procs):
        yield procs


def _ready_twice(proc):
    """serve-ray answers /health once one replica is up; wait until both have answered."""
    plain = proc.ready

    def ready(timeout: float = 180.0):
        plain(timeout)
        deadline = time.monotonic() + timeout
        while len(_replicas_answering(proc)) < 2 and time.monotonic() < deadline:
            time.sleep(0.5)
        return proc
    return ready


def _replicas_answering(proc, n: int = 8) -> set[str]:
    return {proc.get("/health").headers["x-specserve-replica"] for _ in range(n)}


def _complete(proc, prompt: str, **extra) -> tuple[str, str, dict]:
    r = proc.post("/completion", {"prompt": prompt, "n_predict": 24, "temperature": 0, **extra.pop("body", {})},
                  **extra)
    assert r.status_code == 200, r.text
    body = r.json()
    return body["content"], r.headers.get("x-specserve-replica"), body["timings"]


def test_same_greedy_outputs_as_one_server_through_the_openai_client(servers):
    ray_client, single_client = servers["ray"].openai(), servers["single"].openai()
    for prompt in PROMPTS:
        want = single_client.completions.create(model="m", prompt=prompt, max_tokens=24, temperature=0)
        got = ray_client.completions.create(model="m", prompt=prompt, max_tokens=24, temperature=0)
        assert got.choices[0].text == want.choices[0].text
    messages = [{"role": "user", "content": "Write a function that adds two numbers."}]
    want = single_client.chat.completions.create(model="m", messages=messages, max_tokens=24, temperature=0)
    stream = ray_client.chat.completions.create(model="m", messages=messages, max_tokens=24, temperature=0,
                                                stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == want.choices[0].message.content
    repetitive = "x = 1\nx = 1\nx = 1\nx = 1\nx = 1\n"       # n-gram drafts: the per-request spec counters
    _, _, got = _complete(servers["ray"], repetitive)
    _, _, want = _complete(servers["single"], repetitive)
    assert got["draft_n"] == want["draft_n"] > 0 and got["draft_n_accepted"] == want["draft_n_accepted"]


def test_concurrent_requests_use_both_replicas_and_sessions_stay(servers):
    proc = servers["ray"]
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda p: _complete(proc, p), PROMPTS * 3))
    assert len({replica for _, replica, _ in results}) == 2
    single = {p: _complete(servers["single"], p)[0] for p in PROMPTS}
    assert all(text == single[p] for (text, _, _), p in zip(results, PROMPTS * 3))
    for session in ("alice", "bob", "carol"):
        seen = {_complete(proc, p, headers={"X-Session-ID": session})[1] for p in PROMPTS}
        assert len(seen) == 1, f"session {session} went to {seen}"


def test_combined_metrics_are_the_sum_of_the_replicas(servers):
    proc = servers["ray"]
    for p in PROMPTS:
        _complete(proc, p)
    time.sleep(2.5)                       # every replica has pushed its latest counters
    per_replica = metric_values(proc.get("/metrics/replicas").text)
    combined = metric_values(proc.get("/metrics").text)
    name = "llamacpp:tokens_predicted_total"
    parts = {k: v for k, v in per_replica.items() if k.startswith(name + "{")}
    assert len(parts) == 2 and all('replica="' in k for k in parts)
    assert combined[name] == sum(parts.values()) > 0


def test_a_killed_replica_is_replaced_and_the_other_keeps_serving(servers):
    proc = servers["ray"]
    before = _replicas_answering(proc)
    victim = sorted(before)[0]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    subprocess.run([sys.executable, "-c", KILL_ONE_REPLICA.format(replica=victim)], check=True, env=env,
                   capture_output=True, timeout=120)
    want = {p: _complete(servers["single"], p)[0] for p in PROMPTS}
    deadline = time.monotonic() + 120
    served_by = set()
    while time.monotonic() < deadline:
        for p in PROMPTS:                    # no request is lost: none was in flight on the victim
            text, replica, _ = _complete(proc, p)
            assert text == want[p]
            served_by.add(replica)
        if len(_replicas_answering(proc) - {victim}) == 2:
            break
    assert victim not in _replicas_answering(proc, 16)
    assert len(_replicas_answering(proc, 16)) == 2, "the killed replica was not replaced"
