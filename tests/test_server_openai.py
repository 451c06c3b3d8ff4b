"""`specserve serve` through the official openai client and llama-server's routes (real HTTP on loopback)."""
import json
import math

import httpx
import pytest

from support.server import ServerProcess
from specserve import LLM, SamplingParams
from specserve.models.tokenizer import Tokenizer

pytestmark = pytest.mark.server

SPEC_ARGS = ("--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "1", "--spec-ngram-simple-size-m", "4")
REPETITIVE = [5, 9, 12, 5, 9, 12, 5, 9, 12, 40, 41, 42, 5, 9, 12, 5, 9]
MESSAGES = [{"role": "system", "content": "You write Python."}, {"role": "user", "content": "def add(a, b):"}]


@pytest.fixture(scope="module")
def server(tiny_qwen3, tmp_path_factory):
    proc = ServerProcess(tiny_qwen3, tmp_path_factory.mktemp("server") / "server.log", *SPEC_ARGS, "-np", "4").ready()
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def client(server):
    return server.openai()


def test_chat_streaming_matches_non_streaming(server, client, tiny_qwen3):
    r = client.chat.completions.create(model="any", messages=MESSAGES, max_tokens=24, temperature=0)
    choice = r.choices[0]
    assert r.object == "chat.completion" and r.id.startswith("chatcmpl-")
    assert choice.message.role == "assistant" and choice.finish_reason in ("stop", "length")
    tok = Tokenizer(tiny_qwen3)
    prompt = tok.encode(tok.apply_chat_template(MESSAGES), add_special_tokens=False)
    assert r.usage.prompt_tokens == len(prompt) and r.usage.total_tokens == len(prompt) + r.usage.completion_tokens
    timings = r.model_extra["timings"]
    assert timings["prompt_n"] == len(prompt) and timings["predicted_n"] == r.usage.completion_tokens
    assert r.model_extra["metrics"]["speculative_decoding"]["num_spec_tokens"] == 4

    chunks = list(client.chat.completions.create(model="any", messages=MESSAGES, max_tokens=24, temperature=0,
                                                 stream=True, stream_options={"include_usage": True}))
    with_choices = [c for c in chunks if c.choices]
    assert with_choices[0].choices[0].delta.role == "assistant"
    assert all(c.choices[0].delta.role is None for c in with_choices[1:])
    assert "".join(c.choices[0].delta.content or "" for c in with_choices) == choice.message.content
    reasons = [c.choices[0].finish_reason for c in with_choices]
    assert reasons[-1] == choice.finish_reason and not any(reasons[:-1])
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == r.usage.completion_tokens
    assert all(c.usage is None for c in chunks[:-1])
    assert with_choices[-1].model_extra["timings"]["predicted_n"] == r.usage.completion_tokens


def _reference(model, prompt, max_tokens, logprobs=None):
    params = SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True, logprobs=logprobs)
    return LLM(model).generate([prompt], params)[0]


def test_completions_logprobs_are_the_targets(server, client, tiny_qwen3):
    ref = _reference(tiny_qwen3, REPETITIVE, 48, logprobs=3)
    r = client.completions.create(model="any", prompt=REPETITIVE, max_tokens=48, temperature=0, logprobs=3,
                                  extra_body={"ignore_eos": True})
    choice = r.choices[0]
    assert choice.text == ref.text and r.usage.completion_tokens == 48 and choice.finish_reason == "length"
    lp = choice.logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == 48
    for got, want, top in zip(lp.token_logprobs, ref.logprobs, lp.top_logprobs):
        assert math.isclose(got, want.logprob, abs_tol=1e-5)
        assert len(top) >= 3 and max(top.values()) == pytest.approx(want.top[0][1], abs=1e-5)
    spec = r.model_extra["metrics"]["speculative_decoding"]
    assert spec["num_accepted_draft_tokens"] > 0, "this prompt repeats, so n-gram drafts are accepted"
    assert sum(spec["acceptance_histogram"]) == spec["num_spec_steps"]

    chunks = list(client.completions.create(model="any", prompt=REPETITIVE, max_tokens=48, temperature=0,
                                            logprobs=3, stream=True, extra_body={"ignore_eos": True}))
    assert "".join(c.choices[0].text for c in chunks) == ref.text
    streamed = [x for c in chunks if c.choices[0].logprobs for x in c.choices[0].logprobs.token_logprobs]
    assert streamed == lp.token_logprobs


def test_continuous_usage_stats(client):
    chunks = list(client.completions.create(model="any", prompt="for i in", max_tokens=12, temperature=0,
                                            stream=True, extra_body={"ignore_eos": True}, stream_options={
                                                "include_usage": True, "continuous_usage_stats": True}))
    counts = [c.usage.completion_tokens for c in chunks]
    assert counts == sorted(counts) and counts[-1] == 12 and chunks[-1].choices == []
    assert all(c.usage.prompt_tokens == chunks[-1].usage.prompt_tokens for c in chunks)


def test_chat_logprobs(client):
    r = client.chat.completions.create(model="any", messages=MESSAGES, max_tokens=8, temperature=0, logprobs=True,
                                       top_logprobs=2)
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens
    for item in content:
        assert len(item.top_logprobs) == 2 and item.logprob == pytest.approx(item.top_logprobs[0].logprob)


def test_stop_strings(server, client):
    full = client.completions.create(model="any", prompt=REPETITIVE, max_tokens=48, temperature=0,
                                     extra_body={"ignore_eos": True}).choices[0].text
    stop = next(full[i:i + 2] for i in range(6, len(full)) if "\ufffd" not in full[i:i + 2])
    expected = full[:full.index(stop)]
    r = client.completions.create(model="any", prompt=REPETITIVE, max_tokens=48, temperature=0,
                                  stop=[stop, "never appears"], extra_body={"ignore_eos": True})
    assert r.choices[0].text == expected and r.choices[0].finish_reason == "stop"
    assert r.choices[0].model_extra["stop_reason"] == stop
    chunks = client.completions.create(model="any", prompt=REPETITIVE, max_tokens=48, temperature=0, stop=stop,
                                       stream=True, extra_body={"ignore_eos": True})
    assert "".join(c.choices[0].text for c in chunks) == expected
    body = server.post("/completion", {"prompt": REPETITIVE, "n_predict": 48, "temperature": 0, "stop": [stop],
                                       "ignore_eos": True}).json()
    assert body["content"] == expected and body["stop_type"] == "word" and body["stopping_word"] == stop


def test_seeded_sampling_is_reproducible(client):
    def sample(seed):
        return client.completions.create(model="any", prompt="for i in", max_tokens=16, temperature=1.0, top_p=1.0,
                                          seed=seed, extra_body={"top_k": 0, "min_p": 0.0}).choices[0].text
    assert sample(1234) == sample(1234)


def test_default_max_tokens_runs_until_the_context_is_full(server, client):
    prompt = list(range(1, 301)) + list(range(1, 201))        # 500 tokens in a 512-token context
    r = client.completions.create(model="any", prompt=prompt, temperature=0, extra_body={"ignore_eos": True})
    assert r.usage.completion_tokens == 12 and r.choices[0].finish_reason == "length"
    body = server.post("/completion", {"prompt": prompt, "temperature": 0, "ignore_eos": True}).json()
    assert body["tokens_predicted"] == 12 and body["stop_type"] == "limit"


def test_llama_completion_route(server, tiny_qwen3):
    tok = Tokenizer(tiny_qwen3)
    request = {"prompt": "for i in", "n_predict": 16, "temperature": 0, "n_probs": 2, "ignore_eos": True}
    body = server.post("/completion", request).json()
    assert body["stop"] is True and body["stop_type"] == "limit"
    assert body["tokens_predicted"] == 16 == len(body["tokens"])
    assert body["tokens_evaluated"] == len(tok.encode("for i in"))
    assert body["content"] == tok.decode(body["tokens"])
    assert set(body["timings"]) >= {"prompt_n", "prompt_ms", "prompt_per_token_ms", "prompt_per_second",
                                    "predicted_n", "predicted_ms", "predicted_per_token_ms", "predicted_per_second"}
    settings = body["generation_settings"]
    assert settings["n_predict"] == 16 and settings["temperature"] == 0 and settings["speculative.types"] == "ngram-simple"
    probs = body["completion_probabilities"]
    assert [p["id"] for p in probs] == body["tokens"] and all(len(p["top_logprobs"]) == 2 for p in probs)

    with httpx.stream("POST", server.url + "/completion", json={**request, "stream": True}, timeout=60) as resp:
        events = [json.loads(line[6:]) for line in resp.iter_lines() if line.startswith("data: ")]
    assert "".join(e["content"] for e in events) == body["content"]
    assert [t for e in events[:-1] for t in e["tokens"]] == body["tokens"]
    assert events[-1]["stop"] is True and not any(e["stop"] for e in events[:-1])
    assert events[-1]["timings"]["predicted_n"] == 16

    mixed = server.post("/completion", {"prompt": [5, 9, "for i in"], "n_predict": 4, "temperature": 0}).json()
    assert mixed["tokens_evaluated"] == 2 + len(tok.encode("for i in", add_special_tokens=False))


def test_models_health_props_slots(server, tiny_qwen3):
    assert server.get("/health").json() == {"status": "ok"}
    models = server.get("/v1/models").json()
    assert models["object"] == "list" and models["data"][0]["id"] == tiny_qwen3.name
    props = server.get("/props").json()
    assert props["total_slots"] == 4 and props["default_generation_settings"]["n_ctx"] == 512
    assert props["default_generation_settings"]["speculative"] is True and "<|im_start|>" in props["chat_template"]
    params = props["default_generation_settings"]["params"]
    assert params["repeat_last_n"] == 64 and params["speculative.n_max"] == props["speculative"]["n_max"]
    slots = server.get("/slots").json()
    assert [s["id"] for s in slots] == [0, 1, 2, 3] and not any(s["is_processing"] for s in slots)
    # --metrics was not given
    r = server.get("/metrics")
    assert r.status_code == 501 and "--metrics" in r.json()["error"]["message"]


def test_server_log_prints_llama_lines(server):
    log = server.log()
    assert "prompt eval time =" in log and "       eval time =" in log and "      total time =" in log
    assert "draft acceptance = " in log and "     acc per pos = (" in log
    assert "statistics     ngram-simple: #calls(b,g,a) =" in log
    assert "slot      release: id " in log


def test_timings_per_token(server):
    request = {"prompt": "for i in", "n_predict": 6, "temperature": 0, "ignore_eos": True, "stream": True,
               "timings_per_token": True}
    with httpx.stream("POST", server.url + "/completion", json=request, timeout=60) as resp:
        events = [json.loads(line[6:]) for line in resp.iter_lines() if line.startswith("data: ")]
    assert all("timings" in e for e in events)
    assert [e["timings"]["predicted_n"] for e in events[:-1]] == sorted(e["timings"]["predicted_n"] for e in events[:-1])


def test_serve_command_errors(tmp_path):
    import os
    import subprocess
    import sys
    from support.server import ROOT
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")

    def serve(*args):
        return subprocess.run([sys.executable, "-m", "specserve", "serve", *args], capture_output=True, text=True,
                              env=env, timeout=120)
    r = serve("-m", str(tmp_path / "missing"))
    assert r.returncode == 1 and "model directory not found" in r.stderr
    r = serve("--spec-type", "draft-magic")
    assert r.returncode == 1 and "unknown spec type(s) 'draft-magic'" in r.stderr
    r = serve("--port", "eighty")
    assert r.returncode == 2 and "--port" in r.stderr


def test_penalties_and_logit_bias_through_both_apis(server, client, tiny_qwen3):
    """Each API's spelling reaches the engine: the output equals the engine's own with the same
    adjustments (window of 64 tokens, as llama-server), and bad values are named in a 400."""
    params = SamplingParams(temperature=0, max_tokens=20, ignore_eos=True, presence_penalty=1.0,
                            frequency_penalty=0.5, repetition_penalty=1.3, penalty_last_n=64, logit_bias={7: 3.0})
    want = LLM(tiny_qwen3).generate([REPETITIVE], params)[0].token_ids
    assert want != _reference(tiny_qwen3, REPETITIVE, 20).token_ids
    r = client.completions.create(model="m", prompt=REPETITIVE, max_tokens=20, temperature=0, presence_penalty=1.0,
                                  frequency_penalty=0.5, logit_bias={"7": 3.0},
                                  extra_body={"repetition_penalty": 1.3, "ignore_eos": True})
    llama = httpx.post(server.url + "/completion", json={
        "prompt": REPETITIVE, "n_predict": 20, "temperature": 0, "presence_penalty": 1.0, "frequency_penalty": 0.5,
        "repeat_penalty": 1.3, "logit_bias": [[7, 3.0]], "ignore_eos": True, "return_tokens": True}).json()
    assert llama["tokens"] == want
    assert llama["generation_settings"]["repeat_penalty"] == 1.3
    assert llama["generation_settings"]["logit_bias"] == [[7, 3.0]]
    assert r.choices[0].text == llama["content"]
    banned = httpx.post(server.url + "/completion", json={
        "prompt": REPETITIVE, "n_predict": 8, "temperature": 0, "logit_bias": [[want[0], False]],
        "return_tokens": True}).json()
    assert want[0] not in banned["tokens"][:1]
    for body, message in (({"presence_penalty": 3}, "'presence_penalty' must be <= 2.0"),
                          ({"logit_bias": {"7": "x"}}, "'logit_bias' values must be finite numbers"),
                          ({"logit_bias": {"99999": 1}}, "logit_bias token id 99999 is outside the vocabulary")):
        resp = httpx.post(server.url + "/v1/completions", json={"prompt": "x", "max_tokens": 2, **body})
        assert resp.status_code == 400 and message in resp.json()["error"]["message"], resp.text


def test_n_choices_are_seeded_requests(server, client):
    """`n` = 3 gives three choices; choice i is the request with seed + i (choice 0 = the same request
    with n = 1); usage counts the prompt once; streaming interleaves choices by index."""
    sampling = dict(model="m", max_tokens=12, temperature=1.0, top_p=1.0, extra_body={"top_k": 0, "min_p": 0.0})
    many = client.chat.completions.create(messages=MESSAGES, n=3, seed=5, **sampling)
    singles = [client.chat.completions.create(messages=MESSAGES, seed=5 + i, **sampling) for i in range(3)]
    assert [c.index for c in many.choices] == [0, 1, 2]
    assert [c.message.content for c in many.choices] == [s.choices[0].message.content for s in singles]
    assert len({c.message.content for c in many.choices}) > 1            # different seeds, different samples
    assert many.usage.prompt_tokens == singles[0].usage.prompt_tokens
    assert many.usage.completion_tokens == sum(s.usage.completion_tokens for s in singles)

    whole = client.completions.create(prompt=REPETITIVE, n=2, seed=9, **sampling)
    chunks = list(client.completions.create(prompt=REPETITIVE, n=2, seed=9, stream=True,
                                            stream_options={"include_usage": True}, **sampling))
    texts = {0: "", 1: ""}
    for chunk in chunks:
        for choice in chunk.choices:
            texts[choice.index] += choice.text
    assert [texts[0], texts[1]] == [c.text for c in whole.choices]
    finished = [c.choices[0].index for c in chunks if c.choices and c.choices[0].finish_reason]
    assert sorted(finished) == [0, 1]
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
