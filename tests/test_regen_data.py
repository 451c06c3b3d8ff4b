"""The shared drafter training data: target-regenerated continuations of stdlib prompts."""
import numpy as np
import pytest

from specserve import LLM, SamplingParams
from specserve.train.regen_data import (RegenSettings, build_regen_dataset, load_regen_dataset, regen_metadata,
                                        sampling_params)

pytestmark = pytest.mark.train


def test_regenerated_data_is_deterministic_and_cached(tiny_qwen3, tmp_path):
    settings = dict(n_samples=6, new_tokens=10, prompt_tokens_min=8, prompt_tokens_max=20, seed=3)
    first = build_regen_dataset(tiny_qwen3, tmp_path / "a.npz", n_parallel=3, progress=False, **settings)
    second = build_regen_dataset(tiny_qwen3, tmp_path / "b.npz", n_parallel=1, progress=False, **settings)
    assert len(first) == 6
    for a, b in zip(first, second):
        assert a.n_prompt == b.n_prompt and np.array_equal(a.tokens, b.tokens)
        assert 8 <= a.n_prompt <= 20 and len(a.tokens) - a.n_prompt <= 10
    # every greedy sample is exactly the target's greedy continuation of its prompt (and both kinds occur)
    params = sampling_params(RegenSettings(**settings))
    greedy = [s for s, p in zip(first, params) if p.greedy]
    assert 0 < len(greedy) < len(first)
    outs = LLM(tiny_qwen3).generate([s.tokens[:s.n_prompt].tolist() for s in greedy],
                                    SamplingParams(temperature=0, max_tokens=10))
    assert [o.token_ids for o in outs] == [s.tokens[s.n_prompt:].tolist() for s in greedy]
    # a second call with the same settings reuses the file
    meta = regen_metadata(tmp_path / "a.npz")
    (tmp_path / "a.npz").touch()
    again = build_regen_dataset(tiny_qwen3, tmp_path / "a.npz", progress=False, **settings)
    assert regen_metadata(tmp_path / "a.npz") == meta
    assert all(np.array_equal(x.tokens, y.tokens) for x, y in zip(again, load_regen_dataset(tmp_path / "a.npz")))



def test_sampler_of_the_sampled_continuations_is_an_option(tiny_qwen3, tmp_path):
    t1 = RegenSettings(n_samples=4, sampled_fraction=1.0, sampled_temperature=1.0, sampled_top_k=0,
                       sampled_top_p=1.0)
    assert all(p.temperature == 1.0 and p.top_k == 0 and p.top_p == 1.0 for p in sampling_params(t1))
    assert not any(p.greedy for p in sampling_params(t1))
    settings = dict(n_samples=4, new_tokens=6, prompt_tokens_min=8, prompt_tokens_max=12)
    build_regen_dataset(tiny_qwen3, tmp_path / "a.npz", progress=False, **settings)
    # other sampler settings make another file: reusing a.npz for them is an error
    from specserve.errors import OptionError
    with pytest.raises(OptionError, match="other settings"):
        build_regen_dataset(tiny_qwen3, tmp_path / "a.npz", progress=False, sampled_temperature=1.0, **settings)
    with pytest.raises(OptionError, match="--sampled-fraction"):
        build_regen_dataset(tiny_qwen3, tmp_path / "b.npz", progress=False, sampled_fraction=2.0, **settings)
