"""int8 weights (and q8: int8 weights and rows) through the engine: the quantized target is the model
served, speculation stays exactly lossless against it, and a quantized drafter never changes the output."""
import pytest

from support.prompts import SMALL_PROMPTS as PROMPTS
from specserve import LLM, SamplingParams, kernels
from specserve.errors import OptionError

pytestmark = pytest.mark.skipif(kernels.requested() == "torch", reason="SPECSERVE_KERNELS=torch")

GREEDY = SamplingParams(temperature=0, max_tokens=40, ignore_eos=True)


def _ids(llm):
    return [o.token_ids for o in llm.generate(PROMPTS, GREEDY)]


QUANTS = ["int8", "q8"]


@pytest.mark.parametrize("quant", QUANTS)
def test_quantized_target_changes_the_model_a_little(tiny_qwen3_bf16, quant):
    full = LLM(tiny_qwen3_bf16)
    quantized = LLM(tiny_qwen3_bf16, quant=quant)
    assert quantized.target.native.stack.nbytes < 0.6 * full.target.native.stack.nbytes
    logits_full, logits_quantized = full.score(PROMPTS[2]), quantized.score(PROMPTS[2])
    # q8 also rounds every input row to int8: on this random model up to ~5 % of the largest logit
    assert 0 < (logits_full - logits_quantized).abs().max() < 0.1 * logits_full.abs().max()


@pytest.mark.parametrize("spec", [{"spec_type": "ngram-simple", "spec_ngram_simple_size_n": 1},
                                  {"spec_type": "ngram-mod", "spec_ngram_mod_n_match": 2, "spec_ngram_mod_n_min": 1}])
@pytest.mark.parametrize("quant", QUANTS)
def test_speculation_is_lossless_on_a_quantized_target(tiny_qwen3_bf16, spec, quant):
    plain = _ids(LLM(tiny_qwen3_bf16, n_parallel=3, quant=quant))
    assert _ids(LLM(tiny_qwen3_bf16, n_parallel=3, quant=quant, **spec)) == plain


@pytest.mark.parametrize("quant", QUANTS)
def test_a_quantized_drafter_does_not_change_the_output(tiny_qwen3_bf16, quant):
    plain = _ids(LLM(tiny_qwen3_bf16, n_parallel=3))
    drafted = LLM(tiny_qwen3_bf16, draft_model=tiny_qwen3_bf16, spec_type="draft-simple", n_parallel=3,
                  quant_draft=quant)
    assert drafted.engine.driver.proposers[0].model.native.stack.nbytes < \
        0.6 * LLM(tiny_qwen3_bf16).target.native.stack.nbytes
    assert _ids(drafted) == plain
    assert drafted.engine.driver.counters["draft-simple"].n_acc_tokens > 0


def test_bad_quantization_options_are_errors(tiny_qwen3_bf16, torch_kernels):
    with pytest.raises(OptionError, match="--quant must be one of none, int8, q8"):
        LLM(tiny_qwen3_bf16, quant="int4")
    with pytest.raises(OptionError, match="needs the native CPU kernels"):
        LLM(tiny_qwen3_bf16, quant="int8")
