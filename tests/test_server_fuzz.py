"""Seeded fuzzing of the HTTP routes (loopback only, bounded): whatever the body, the answer is a
response in the route's error schema or a normal result, never a 5xx, never a traceback in the
log, and the server keeps serving."""
import json
import random

import httpx
import pytest

from support.models import write_model
from support.server import ServerProcess

pytestmark = pytest.mark.server

N_BODIES = 400
ROUTES = {
    "/completion": ["prompt", "n_predict", "temperature", "top_k", "top_p", "min_p", "seed", "stop", "stream",
                    "n_probs", "logit_bias", "repeat_penalty", "ignore_eos", "cache_prompt"],
    "/v1/completions": ["prompt", "max_tokens", "temperature", "top_p", "seed", "stop", "stream", "logprobs", "n",
                        "logit_bias", "presence_penalty", "frequency_penalty", "echo", "user"],
    "/v1/chat/completions": ["messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "seed",
                             "stop", "stream", "logprobs", "top_logprobs", "n", "response_format", "tools"],
}
STRINGS = ["", "x", "def f(x):", "\u0000", "\ud800", "a\udfff", "\u2028", "🙂" * 3, "x" * 5000, "<|im_end|>",
           "null", "-1", "1e308"]
NUMBERS = [0, 1, -1, 3, 2 ** 31, 2 ** 63, -(2 ** 63), 10 ** 30, 0.5, -0.0, 1e308, 1e-308, 2.5]


def random_value(rng: random.Random, depth: int = 0):
    kind = rng.randrange(9 if depth < 3 else 5)
    if kind == 0:
        return rng.choice(STRINGS)
    if kind == 1:
        return rng.choice(NUMBERS)
    if kind == 2:
        return rng.choice([True, False, None])
    if kind == 3:
        return [rng.randrange(-3, 400) for _ in range(rng.randrange(6))]
    if kind == 4:
        return {"role": rng.choice(["user", "system", "assistant", "tool", "x"]), "content": rng.choice(STRINGS)}
    if kind == 5:
        return [random_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    if kind == 6:
        return {rng.choice(STRINGS + ["role", "content", "type", "text"]): random_value(rng, depth + 1)
                for _ in range(rng.randrange(4))}
    if kind == 7:
        nested = 1
        for _ in range(rng.choice([5, 99, 101, 500])):       # (deeper: test_server_robustness.py)
            nested = [nested]
        return nested
    return [{"role": "user", "content": rng.choice(STRINGS)}]


def random_body(rng: random.Random, route: str) -> bytes:
    if rng.random() < 0.1:          # not a JSON object at all
        return rng.choice([b"", b"{", b"[]", b"null", b'"x"', bytes(rng.randrange(256) for _ in range(20))])
    fields = rng.sample(ROUTES[route], rng.randrange(1, 6))
    if rng.random() < 0.1:
        fields.append(rng.choice(STRINGS))
    body = {field: random_value(rng) for field in fields}
    for name in ("n_predict", "max_tokens", "max_completion_tokens"):       # keep real generations short
        if isinstance(body.get(name), int) and not isinstance(body[name], bool) and body[name] > 8:
            body[name] = 8
    text = json.dumps(body, ensure_ascii=rng.random() < 0.5, allow_nan=True)
    return text.encode("utf-8", "surrogatepass")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    model = write_model(tmp_path_factory.mktemp("fuzz_model"), "qwen3", seed=3, max_position_embeddings=256)
    proc = ServerProcess(model, tmp_path_factory.mktemp("fuzz") / "server.log", "-np", "2", "-c", "256",
                         "-n", "8", "--spec-type", "ngram-simple").ready()
    yield proc
    proc.stop()


def test_fuzzed_bodies_never_get_a_server_error(server):
    rng = random.Random(1234)
    statuses = {}
    with httpx.Client(timeout=60) as client:
        for _ in range(N_BODIES):
            route = rng.choice(list(ROUTES))
            body = random_body(rng, route)
            r = client.post(server.url + route, content=body, headers={"Content-Type": "application/json"})
            assert r.status_code < 500, (route, body[:300], r.text[:500])
            statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
            if r.status_code >= 400 and not r.headers.get("content-type", "").startswith("text/event-stream"):
                assert set(r.json()["error"]) == {"message", "type", "param", "code"}, r.text
        assert statuses.get(200, 0) > 0 and statuses.get(400, 0) > N_BODIES // 2, statuses
        ok = client.post(server.url + "/v1/completions", json={"prompt": "x", "max_tokens": 3, "temperature": 0})
        assert ok.status_code == 200 and ok.json()["usage"]["completion_tokens"] == 3
    assert "Traceback" not in server.log()
