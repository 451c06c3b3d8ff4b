"""Every registered spec type that needs no draft model works through the server: greedy
output equals the output without speculation, drafts happen, statistics are printed."""
import asyncio

import openai
import pytest

from support.server import ServerProcess, running
from support.prompts import NGRAM_PROMPTS
from specserve import LLM, SamplingParams
from specserve.speculative.registry import all_options, draftless_types

pytestmark = pytest.mark.server

PROMPTS = NGRAM_PROMPTS[:4]
# small sizes so drafting starts early in short sequences (options of every type; each server uses its own)
SMALL = {
    "spec_ngram_simple_size_n": 1, "spec_ngram_simple_size_m": 4,
    "spec_ngram_map_k_size_n": 2, "spec_ngram_map_k_size_m": 6,
    "spec_ngram_map_k4v_size_n": 2, "spec_ngram_map_k4v_size_m": 6,
    "spec_ngram_mod_n_match": 3, "spec_ngram_mod_n_min": 1, "spec_ngram_mod_n_max": 8,
}
TYPES = draftless_types()


def small_flags() -> list[str]:
    flags = []
    for opt in all_options():
        if opt.dest in SMALL:
            flags += [next(f for f in opt.flags if f.startswith("--")), str(SMALL[opt.dest])]
    return flags


@pytest.fixture(scope="module")
def cases(tiny_qwen3):
    """Prompts, two of them ending with the model's own loopy output (their continuations
    repeat n-grams of the prompt), and the greedy outputs without speculation."""
    base = LLM(tiny_qwen3)
    params = SamplingParams(temperature=0, max_tokens=25, ignore_eos=True)
    loops = [o.token_ids for o in base.generate([PROMPTS[0], PROMPTS[3]], params)]
    prompts = PROMPTS + [PROMPTS[0] + loops[0], PROMPTS[3] + loops[1]]
    outs = base.generate(prompts, SamplingParams(temperature=0, max_tokens=40, ignore_eos=True))
    return prompts, [o.text for o in outs]


@pytest.fixture(scope="module")
def servers(tiny_qwen3, tmp_path_factory):
    logs = tmp_path_factory.mktemp("spec_types")
    procs = {t: ServerProcess(tiny_qwen3, logs / f"{t}.log", "-np", "3", "--spec-type", t, *small_flags())
             for t in TYPES}
    with running(procs):
        yield procs


async def _complete_all(url, prompts):
    client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=120)
    try:
        return await asyncio.gather(*(client.completions.create(
            model="m", prompt=p, max_tokens=40, temperature=0, extra_body={"ignore_eos": True}) for p in prompts))
    finally:
        await client.close()


@pytest.mark.parametrize("spec_type", TYPES)
def test_spec_type_through_the_server(servers, cases, spec_type):
    server = servers[spec_type]
    prompts, reference = cases
    results = asyncio.run(_complete_all(server.url, prompts))
    assert [r.choices[0].text for r in results] == reference
    stats = [r.model_extra["metrics"]["speculative_decoding"] for r in results]
    assert sum(s["num_draft_tokens"] for s in stats) > 0, f"{spec_type} never drafted"
    for r, s in zip(results, stats):
        assert r.model_extra["timings"].get("draft_n", 0) == s["num_draft_tokens"]
        assert sum(s["acceptance_histogram"]) == s["num_spec_steps"]
    assert f"statistics {spec_type:>16}: #calls(b,g,a)" in server.log()
