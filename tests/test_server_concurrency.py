"""16 concurrent greedy requests on 4 slots with speculation equal each request served alone
without it; the Prometheus counters reconcile with the per-request statistics."""
import asyncio
import math

import openai
import pytest

from support.prompts import ENGINE_PROMPTS
from support.server import ServerProcess, metric_values

pytestmark = pytest.mark.server

PROMPTS = ENGINE_PROMPTS + ["def add(a, b):\n    return a + b\n", "for i in range(10):"]
MESSAGES = [[{"role": "user", "content": "class Stack:"}],
            [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "import os"}]]


def requests():
    """16 requests: completions with token-id and text prompts, and chats; varied lengths."""
    out = []
    for i in range(12):
        out.append(("completion", PROMPTS[i % len(PROMPTS)], 24 + 8 * (i % 5)))
    for i in range(4):
        out.append(("chat", MESSAGES[i % 2], 16 + 12 * i))
    return out


@pytest.fixture(scope="module")
def servers(tiny_qwen3, tmp_path_factory):
    logs = tmp_path_factory.mktemp("concurrency")
    spec = ServerProcess(tiny_qwen3, logs / "spec.log", "-np", "4", "--metrics", "--spec-type", "ngram-simple",
                         "--spec-ngram-simple-size-n", "1", "--spec-ngram-simple-size-m", "4")
    plain = ServerProcess(tiny_qwen3, logs / "plain.log", "-np", "1")
    try:
        spec.ready()
        plain.ready()
    except Exception:
        spec.stop()
        plain.stop()
        raise
    yield spec, plain
    spec.stop()
    plain.stop()


async def send(client: openai.AsyncOpenAI, kind, prompt, max_tokens):
    common = dict(model="any", max_tokens=max_tokens, temperature=0, logprobs=True if kind == "chat" else 1,
                  extra_body={"ignore_eos": True})
    if kind == "chat":
        r = await client.chat.completions.create(messages=prompt, **common)
        choice = r.choices[0]
        return choice.message.content, [c.logprob for c in choice.logprobs.content], r
    r = await client.completions.create(prompt=prompt, **common)
    choice = r.choices[0]
    return choice.text, choice.logprobs.token_logprobs, r


async def run_all(server, jobs, concurrent: bool):
    client = openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0, timeout=120)
    try:
        if concurrent:
            return await asyncio.gather(*(send(client, *job) for job in jobs))
        return [await send(client, *job) for job in jobs]
    finally:
        await client.close()


def test_concurrent_speculative_equals_sequential_plain(servers):
    spec, plain = servers
    jobs = requests()
    before = metric_values(spec.get("/metrics").text)
    together = asyncio.run(run_all(spec, jobs, concurrent=True))
    after = metric_values(spec.get("/metrics").text)
    alone = asyncio.run(run_all(plain, jobs, concurrent=False))

    for job, (text_a, logprobs_a, r_a), (text_b, logprobs_b, r_b) in zip(jobs, together, alone):
        assert text_a == text_b, job
        assert r_a.usage.completion_tokens == r_b.usage.completion_tokens == job[2]
        assert all(math.isclose(a, b, abs_tol=1e-5) for a, b in zip(logprobs_a, logprobs_b, strict=True))
        assert "metrics" not in r_b.model_extra        # no speculation, no speculative metrics

    # the counters moved by exactly the sum of the per-request statistics
    stats = [r.model_extra["metrics"]["speculative_decoding"] for _, _, r in together]
    timings = [r.model_extra["timings"] for _, _, r in together]
    assert sum(s["num_accepted_draft_tokens"] for s in stats) > 0, "some drafts must be accepted"

    def delta(name):
        return after.get(name, 0.0) - before.get(name, 0.0)

    model = f'model_name="{spec.get("/v1/models").json()["data"][0]["id"]}"'
    n_drafts = sum(s["num_spec_steps"] for s in stats)
    n_draft_tokens = sum(s["num_draft_tokens"] for s in stats)
    n_accepted = sum(s["num_accepted_draft_tokens"] for s in stats)
    assert n_draft_tokens == sum(t.get("draft_n", 0) for t in timings)
    assert n_accepted == sum(t.get("draft_n_accepted", 0) for t in timings)
    assert delta("llamacpp:spec_decode_num_drafts_total") == n_drafts
    assert delta("llamacpp:spec_decode_num_draft_tokens_total") == n_draft_tokens
    assert delta("llamacpp:spec_decode_num_accepted_tokens_total") == n_accepted
    assert delta(f"vllm:spec_decode_num_drafts_total{{{model}}}") == n_drafts
    assert delta(f"vllm:spec_decode_num_draft_tokens_total{{{model}}}") == n_draft_tokens
    assert delta(f"vllm:spec_decode_num_accepted_tokens_total{{{model}}}") == n_accepted
    for pos in range(4):
        per_pos = sum(s["per_position_accepted"][pos] if pos < len(s["per_position_accepted"]) else 0
                      for s in stats)
        assert delta(f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{model},position="{pos}"}}') == per_pos
        assert delta(f'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{{position="{pos}"}}') == per_pos
    # histogram entry j counts steps that accepted j tokens: it sums back to the totals
    for s in stats:
        hist = s["acceptance_histogram"]
        assert sum(hist) == s["num_spec_steps"] and sum(j * c for j, c in enumerate(hist)) == \
            s["num_accepted_draft_tokens"]

    n_prompt = sum(r.usage.prompt_tokens for _, _, r in together)
    n_completion = sum(r.usage.completion_tokens for _, _, r in together)
    assert delta("llamacpp:prompt_tokens_total") == n_prompt
    assert delta("llamacpp:tokens_predicted_total") == n_completion
    assert delta(f"vllm:prompt_tokens_total{{{model}}}") == n_prompt
    assert delta(f"vllm:generation_tokens_total{{{model}}}") == n_completion
    assert delta(f'vllm:request_success_total{{finished_reason="length",{model}}}') == len(jobs)
    assert delta(f"vllm:e2e_request_latency_seconds_count{{{model}}}") == len(jobs)
    assert delta(f"vllm:time_to_first_token_seconds_count{{{model}}}") == len(jobs)
    assert after["llamacpp:requests_processing"] == 0 and after["llamacpp:requests_deferred"] == 0
    # the native kernels' pool ran the steps' parallel jobs (some of them alone when the machine was busy)
    assert delta("specserve:kernel_jobs") > 0 and 0 <= delta("specserve:kernel_solo_jobs") <= delta("specserve:kernel_jobs")
