"""--cache-type-k / --cache-type-v: half-precision KV caches through the engine stay exactly lossless,
and what cannot run says so."""
import pytest

from support.prompts import SMALL_PROMPTS as PROMPTS
from specserve import LLM, SamplingParams, kernels
from specserve.errors import OptionError

pytestmark = pytest.mark.skipif(kernels.requested() == "torch", reason="SPECSERVE_KERNELS=torch")

GREEDY = SamplingParams(temperature=0, max_tokens=40, ignore_eos=True)


def _ids(llm):
    return [o.token_ids for o in llm.generate(PROMPTS, GREEDY)]


@pytest.mark.parametrize("k,v", [("f16", "f16"), ("bf16", "bf16")])
def test_speculation_is_lossless_on_a_half_precision_cache(tiny_qwen3, k, v):
    options = dict(n_parallel=3, cache_type_k=k, cache_type_v=v)
    plain = _ids(LLM(tiny_qwen3, **options))
    spec = LLM(tiny_qwen3, spec_type="ngram-simple", spec_ngram_simple_size_n=1, **options)
    assert _ids(spec) == plain
    assert spec.engine.cache.k.element_size() == 2 and spec.engine.cache.v.element_size() == 2


def test_bad_cache_types_are_errors(tiny_qwen3, torch_kernels):
    with pytest.raises(OptionError, match="--cache-type-k must be one of f32, f16, bf16"):
        LLM(tiny_qwen3, cache_type_k="q8_0")
    with pytest.raises(OptionError, match="need the native CPU kernels"):
        LLM(tiny_qwen3, cache_type_v="f16")
