"""draft-simple, draft-eagle3 and draft-mtp through a real server: concurrent greedy requests give
the output without speculation, drafts happen and the statistics lines are printed; an
incompatible draft model stops the server at startup with a clear message."""
import asyncio
import shutil

import openai
import pytest

from support.model_drafters import add_mtp, perturbed_copy, write_eagle3
from support.models import write_model
from support.server import ServerProcess
from support.prompts import DRAFTER_PROMPTS, PI
from specserve import LLM, SamplingParams

pytestmark = pytest.mark.server

PROMPTS = DRAFTER_PROMPTS[:3] + [PI[:11]]


async def _complete_all(url, prompts):
    client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=120)
    try:
        return await asyncio.gather(*(client.completions.create(
            model="m", prompt=p, max_tokens=30, temperature=0, extra_body={"ignore_eos": True}) for p in prompts))
    finally:
        await client.close()


def test_model_drafters_through_the_server(tmp_path):
    target = write_model(tmp_path / "t", "qwen3", seed=1, std=0.25, num_hidden_layers=4)
    reference = [o.text for o in LLM(target).generate(PROMPTS, SamplingParams(temperature=0, max_tokens=30,
                                                                              ignore_eos=True))]
    with_mtp = tmp_path / "t-mtp"
    shutil.copytree(target, with_mtp)
    add_mtp(with_mtp, "deepseek")
    configs = {
        "draft-simple": (target, ["-md", str(perturbed_copy(target, tmp_path / "near", noise=0.004))]),
        "draft-eagle3": (target, ["-md", str(write_eagle3(tmp_path / "e", target, "specforge", draft_vocab=200))]),
        "draft-mtp": (with_mtp, []),
    }
    servers = {t: ServerProcess(model, tmp_path / f"{t}.log", "-np", "3", "--spec-type", t, *extra)
               for t, (model, extra) in configs.items()}
    try:
        for server in servers.values():
            server.ready()
        for spec_type, server in servers.items():
            results = asyncio.run(_complete_all(server.url, PROMPTS))
            stats = [r.model_extra["metrics"]["speculative_decoding"] for r in results]
            assert sum(s["num_draft_tokens"] for s in stats) > 0, spec_type
            assert f"statistics {spec_type:>16}: #calls(b,g,a)" in server.log()
            assert [r.choices[0].text for r in results] == reference, spec_type
    finally:
        for server in servers.values():
            server.stop()


def test_incompatible_draft_model_stops_the_server_with_a_clear_error(tmp_path):
    target = write_model(tmp_path / "t", "qwen3", seed=1)
    big = write_model(tmp_path / "big", "qwen3", vocab_size=512)
    server = ServerProcess(target, tmp_path / "s.log", "--spec-type", "draft-simple", "-md", str(big))
    with pytest.raises(RuntimeError, match="vocabulary size 512 differs from the target's 320"):
        server.ready()
    server.stop()
