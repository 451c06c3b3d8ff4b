"""Bad input, bad auth, failing requests, disconnects and timeouts: each gets a clear error
and nothing else in flight is disturbed."""
import json
import time

import httpx
import openai
import pytest

from support.models import write_model
from support.server import ServerProcess, metric_values

pytestmark = pytest.mark.server

KEY = "sekret-key"
CTX = 16384
TIMEOUT_S = 4
# holds test-slow's trigger: an unbounded request on it runs for about a minute, on any machine
LONG_PROMPT = [5, 9, 12, 5, 9, 12, 40, 41, 318, 42]
FAULTY_PROMPT = [319, 5, 6]          # the test-faulty proposer breaks verification for this request


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    model = write_model(tmp_path_factory.mktemp("long_ctx_model"), "qwen3", seed=1, std=0.25,
                        max_position_embeddings=CTX)
    proc = ServerProcess(model, tmp_path_factory.mktemp("robust") / "server.log", "-np", "2", "-c", str(CTX),
                         "--metrics", "--timeout", str(TIMEOUT_S), "--spec-type", "ngram-simple,test-faulty,test-slow",
                         "--spec-ngram-simple-size-n", "1", "--spec-ngram-simple-size-m", "4",
                         test_proposers=True, api_key=KEY).ready()
    yield proc
    proc.stop()


def data_events(lines):
    for line in lines:
        if line.startswith("data: ") and line != "data: [DONE]":
            yield json.loads(line[6:])


def busy_slots(server) -> int:
    return sum(s["is_processing"] for s in server.get("/slots").json())


def wait_for(predicate, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_api_key(server):
    url = server.url
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": KEY}):
        r = httpx.get(url + "/v1/models", headers=headers)
        assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
    r = httpx.post(url + "/v1/completions", json={"prompt": "x", "max_tokens": 2})
    assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
    assert httpx.get(url + "/metrics").status_code == 401
    assert httpx.get(url + "/health").json() == {"status": "ok"}
    assert httpx.get(url + "/v1/models", headers={"X-Api-Key": KEY}).status_code == 200
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=url + "/v1", api_key="wrong", max_retries=0).models.list()
    assert server.openai().completions.create(model="m", prompt="x", max_tokens=2).usage.completion_tokens == 2


BAD_REQUESTS = [
    ("/v1/chat/completions", b"{not json", 400, "not valid JSON"),
    ("/v1/chat/completions", b"", 400, "body is empty"),
    ("/v1/chat/completions", {"messages": []}, 400, "at least one message"),
    ("/v1/chat/completions", {"messages": [{"role": "user"}]}, 400, "messages[0].content is required"),
    ("/v1/chat/completions", {"messages": [{"role": "robot", "content": "x"}]}, 400, "messages[0].role"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "max_tokens": -5}, 400,
     "'max_tokens' must be >= 1"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "max_tokens": 10 ** 9}, 400,
     "maximum context length is 16384"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "temperature": "hot"}, 400,
     "'temperature' must be a finite number"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "n": 65}, 400, "'n' must be <= 64"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "frobnicate": 1}, 400,
     "Unrecognized request argument supplied: frobnicate"),
    ("/v1/completions", {"prompt": "x " * 20000}, 400, "the context size is 16384"),
    ("/v1/completions", {"prompt": [1, 2, 10 ** 6]}, 400, "outside the vocabulary"),
    ("/v1/completions", {"prompt": {"a": 1}}, 400, "'prompt' must be a string or an array of token ids"),
    ("/v1/completions", {}, 400, "'prompt' is required"),
    ("/v1/completions", {"prompt": "x", "stop": 5}, 400, "'stop' must be a string or an array of strings"),
    ("/v1/completions", {"prompt": "x", "seed": 2 ** 70}, 400, "'seed' must be <="),
    ("/v1/completions", {"prompt": "x", "logprobs": 50}, 400, "'logprobs' must be <= 20"),
    ("/v1/completions", {"prompt": "x", "logit_bias": {"99999": 1}}, 400, "logit_bias token id 99999 is outside"),
    ("/completion", {"prompt": "x", "n_predict": -7}, 400, "'n_predict' must be >= -1"),
    ("/completion", {"prompt": 3.5}, 400, "'prompt' must be a string"),
    # JSON that no later step can handle: lone surrogates (in values, keys, nested) and deep nesting
    ("/completion", b'{"prompt": "\\u0000\\ud800", "n_predict": 4}', 400, "'prompt' contains an unpaired UTF-16"),
    ("/v1/completions", b'{"prompt": "x", "max_tokens": "\\u0000\\ud800"}', 400, "'max_tokens' contains an unpaired"),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "a\\udc00"}], "seed": 1}', 400,
     "'messages[0].content' contains an unpaired UTF-16 surrogate"),
    ("/v1/completions", b'{"\\ud800": 1, "prompt": "x"}', 400, "contains an unpaired UTF-16 surrogate"),
    ("/v1/completions", b'{"prompt": ' + b"[" * 100000 + b"]" * 100000 + b"}", 400, "nested more than 100 levels"),
    ("/v1/chat/completions", b'{"messages": ' + b"[" * 150 + b"]" * 150 + b"}", 400, "nested more than 100 levels"),
    ("/v1/nothing", {}, 404, "no route POST /v1/nothing"),
]


def test_malformed_requests_do_not_disturb_a_stream(server):
    request = {"prompt": LONG_PROMPT, "max_tokens": 1000, "temperature": 0, "ignore_eos": True}
    reference = server.post("/v1/completions", request).json()["choices"][0]["text"]
    headers = server.headers()
    with httpx.stream("POST", server.url + "/v1/completions", json={**request, "stream": True}, headers=headers,
                      timeout=60) as stream:
        lines = stream.iter_lines()
        text = next(data_events(lines))["choices"][0]["text"]
        for path, body, status, message in BAD_REQUESTS:
            kw = {"content": body} if isinstance(body, bytes) else {"json": body}
            r = httpx.post(server.url + path, headers=headers, timeout=30, **kw)
            assert r.status_code == status, (path, body, r.text)
            error = r.json()["error"]
            assert message in error["message"], (message, error)
            assert set(error) == {"message", "type", "param", "code"}
            if "logit_bias" in message:
                assert error["param"] == "logit_bias"
        events = list(data_events(lines))
    text += "".join(e["choices"][0]["text"] for e in events if e["choices"])
    assert text == reference and events[-1]["choices"][0]["finish_reason"] == "length"


def test_a_failing_request_ends_alone_with_500(server):
    request = {"prompt": LONG_PROMPT, "max_tokens": 300, "temperature": 0, "ignore_eos": True}
    reference = server.post("/v1/completions", request).json()["choices"][0]["text"]
    with httpx.stream("POST", server.url + "/v1/completions", json={**request, "stream": True},
                      headers=server.headers(), timeout=60) as stream:
        lines = stream.iter_lines()
        text = next(data_events(lines))["choices"][0]["text"]
        bad = server.post("/v1/completions", {"prompt": FAULTY_PROMPT, "max_tokens": 50, "temperature": 1.0})
        assert bad.status_code == 500
        error = bad.json()["error"]
        assert error["type"] == "server_error" and error["message"].startswith("internal error: ")
        text += "".join(e["choices"][0]["text"] for e in data_events(lines) if e["choices"])
    assert text == reference
    # in a stream the error arrives as an event
    with httpx.stream("POST", server.url + "/v1/completions", headers=server.headers(), timeout=60,
                      json={"prompt": FAULTY_PROMPT, "max_tokens": 50, "temperature": 1.0, "stream": True}) as s:
        events = list(data_events(s.iter_lines()))
    assert "internal error" in events[-1]["error"]["message"]
    assert server.post("/completion", {"prompt": "for", "n_predict": 4, "ignore_eos": True}).json()["tokens_predicted"] == 4


def test_client_disconnect_frees_the_slot(server):
    before = metric_values(server.get("/metrics").text)
    unbounded = {"prompt": LONG_PROMPT, "temperature": 0, "ignore_eos": True, "stream": True}  # fills 16k tokens
    headers = server.headers()
    with httpx.stream("POST", server.url + "/v1/completions", json=unbounded, headers=headers,
                      timeout=60) as keeper:
        keeper_lines = keeper.iter_lines()
        next(data_events(keeper_lines))
        with httpx.stream("POST", server.url + "/v1/completions", json=unbounded, headers=headers,
                          timeout=60) as leaver:
            events = data_events(leaver.iter_lines())
            next(events), next(events)
            assert busy_slots(server) == 2
        # the closed connection aborts its request; its slot frees while the other stream runs on
        assert wait_for(lambda: busy_slots(server) == 1, 2.0)
        r = server.post("/v1/completions", {"prompt": [5, 9], "max_tokens": 8, "temperature": 0})
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 8
        assert next(data_events(keeper_lines))["choices"]
    assert wait_for(lambda: busy_slots(server) == 0, 2.0)
    # a non-streaming client that gives up is noticed too
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(server.url + "/v1/completions", json={**unbounded, "stream": False}, headers=headers, timeout=0.5)
    assert wait_for(lambda: busy_slots(server) == 0, 2.0)
    after = metric_values(server.get("/metrics").text)
    key = [k for k in after if k.startswith('vllm:request_success_total{finished_reason="abort"')][0]
    assert after[key] - before.get(key, 0) == 3
    assert server.log().count("finish_reason = abort") >= 3


def test_timeout(server):
    r = server.post("/v1/completions", {"prompt": LONG_PROMPT, "temperature": 0, "ignore_eos": True})
    assert r.status_code == 408, r.text
    error = r.json()["error"]
    assert error["code"] == "timeout" and f"timeout of {TIMEOUT_S} s (--timeout)" in error["message"]
    assert wait_for(lambda: busy_slots(server) == 0, 2.0)
