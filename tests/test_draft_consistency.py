"""The model drafters keep their draft KV caches in sync with the target through acceptances,
rejections, prompt chunking and slot reuse: every draft the engine gets equals the draft
recomputed from scratch from the committed tokens alone."""
import pytest
import torch

from support.model_drafters import add_mtp, perturbed_copy, write_eagle3
from support.models import write_model
from specserve import LLM, SamplingParams
from specserve.models.step_batch import StepBatch
from specserve.models.tap_store import FINAL

PROMPTS = [[5, 9, 12, 5, 9, 12, 5, 9], list(range(60, 130)), [7] * 12, [3, 1, 4, 1, 5, 9, 2, 6], [250, 251],
           [11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21]]


def _record_drafts(llm):
    seen = []
    driver_draft = llm.engine.driver.draft

    def spy(requests):
        result = driver_draft(requests)
        for req in requests:
            if req.slot in result:
                seen.append((req.tokens.copy(), req.id_last, result[req.slot].tokens))
        return result

    llm.engine.driver.draft = spy
    return seen


def _greedy_chain(first_step, next_step, n, id_map=None):
    """first_step() -> (logits, hidden); next_step(target token, pos_offset, hidden) -> (logits, hidden)."""
    to_target = (lambda i: i) if id_map is None else (lambda i: int(id_map[i]))
    logits, hidden = first_step()
    out = [to_target(int(logits[-1].argmax()))]
    for i in range(1, n):
        logits, hidden = next_step(out[-1], i, hidden)
        out.append(to_target(int(logits[-1].argmax())))
    return out


def _recompute_draft_simple(proposer, tokens, id_last, n):
    model = proposer.model
    seq = list(tokens) + [id_last]
    cache = model.new_cache(1, 512)

    def first():
        return model.forward_step(StepBatch.build([(0, seq, 0)], [len(seq) - 1]), cache).logits, None

    def step(tok, i, _):
        return model.forward_step(StepBatch.build([(0, [tok], len(seq) - 1 + i)], [0]), cache).logits, None
    return _greedy_chain(first, step, n)


def _recompute_hidden_head(proposer, tokens, id_last, n):
    target, head = proposer.ctx.target, proposer.head
    tcache = target.new_cache(1, 512)
    out = target.forward_step(StepBatch.build([(0, list(tokens), 0)], []), tcache,
                              taps=tuple(t for t in proposer.taps if t != FINAL), want_final_hidden=FINAL in proposer.taps)
    states = [out.final_hidden if layer == FINAL else out.tap(layer) for layer in proposer.taps]
    feats = proposer.project(torch.cat(states, dim=-1))
    rows = list(tokens[1:]) + [id_last]
    cache = head.new_cache(1, 512)
    n_rows = len(rows)

    def first():
        return head.forward_step(StepBatch.build([(0, rows, 0)], [n_rows - 1]), feats, cache)

    def step(tok, i, hidden):
        return head.forward_step(StepBatch.build([(0, [tok], n_rows - 1 + i)], [0]), hidden, cache)
    return _greedy_chain(first, step, n, proposer.id_map)


def _check(llm, recompute, params):
    seen = _record_drafts(llm)
    llm.generate(PROMPTS, params)
    proposer = llm.engine.driver.proposers[0]
    assert len(seen) > 20
    with torch.inference_mode():
        for tokens, id_last, drafted in seen:
            assert recompute(proposer, tokens, id_last, len(drafted)) == drafted


@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_draft_simple_stays_in_sync(tiny_qwen3, tmp_path, temperature):
    draft = perturbed_copy(tiny_qwen3, tmp_path / "d", noise=0.004)
    llm = LLM(tiny_qwen3, spec_type="draft-simple", draft_model=draft, n_parallel=3, n_batch=16,
              spec_draft_n_max=4)
    _check(llm, _recompute_draft_simple, SamplingParams(temperature=temperature, max_tokens=30, ignore_eos=True,
                                                        seed=3))


@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_eagle3_stays_in_sync(tmp_path, temperature):
    target = write_model(tmp_path / "t", "qwen3", seed=4, std=0.25, num_hidden_layers=6, tokenizer=False)
    draft = write_eagle3(tmp_path / "e", target, "specforge", draft_vocab=250, std=0.3)
    llm = LLM(target, spec_type="draft-eagle3", draft_model=draft, n_parallel=3, n_batch=16, spec_draft_n_max=4)
    _check(llm, _recompute_hidden_head, SamplingParams(temperature=temperature, max_tokens=30, ignore_eos=True,
                                                       seed=3))


@pytest.mark.parametrize("layout", ["deepseek", "mimo"])
def test_mtp_stays_in_sync(tmp_path, layout):
    target = write_model(tmp_path / "t", "qwen2" if layout == "mimo" else "qwen3", seed=1, std=0.25,
                         tokenizer=False)
    add_mtp(target, layout, std=0.3)
    llm = LLM(target, spec_type="draft-mtp", n_parallel=3, n_batch=16, spec_draft_n_max=4)
    _check(llm, _recompute_hidden_head, SamplingParams(temperature=0, max_tokens=30, ignore_eos=True))


def test_bfloat16_target_and_drafters_stay_in_sync(tmp_path):
    """The bundled model is served in bfloat16: heads and draft models then run in bfloat16 too."""
    target = write_model(tmp_path / "t", "qwen3", seed=4, std=0.25, num_hidden_layers=6, tokenizer=False,
                         dtype=torch.bfloat16, torch_dtype="bfloat16")
    draft = write_eagle3(tmp_path / "e", target, "specforge", std=0.3)
    add_mtp(target, "deepseek", std=0.3)
    params = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)
    reference = [o.token_ids for o in LLM(target).generate(PROMPTS, params)]
    for spec_type, recompute in (("draft-eagle3", _recompute_hidden_head), ("draft-mtp", _recompute_hidden_head),
                                 ("draft-simple", _recompute_draft_simple)):
        llm = LLM(target, spec_type=spec_type, draft_model=draft if spec_type == "draft-eagle3" else
                  target if spec_type == "draft-simple" else None, n_parallel=3, n_batch=16, spec_draft_n_max=4)
        assert llm.engine.target.dtype == torch.bfloat16
        seen = _record_drafts(llm)
        assert [o.token_ids for o in llm.generate(PROMPTS, params)] == reference
        proposer = llm.engine.driver.proposers[0]
        with torch.inference_mode():
            for tokens, id_last, drafted in seen:
                assert recompute(proposer, tokens, id_last, len(drafted)) == drafted, spec_type


@pytest.mark.parametrize("spec_type", ["draft-eagle3", "draft-mtp"])
def test_sampled_hidden_state_drafts_keep_the_target_distribution(tmp_path, spec_type):
    """With --spec-draft-sample the heads sample their drafts and pass q (a reduced EAGLE-3
    vocabulary puts q on a subset of the target's ids): the output distribution is the target's."""
    from support.distribution import VOCAB, assert_target_pair_distribution
    target = write_model(tmp_path / "t", "qwen3", seed=11, std=0.6, tokenizer=False, vocab_size=VOCAB,
                         num_hidden_layers=3)
    draft = None
    if spec_type == "draft-eagle3":
        draft = write_eagle3(tmp_path / "e", target, "speculators", layer_ids=[1, 2, 3], draft_vocab=7, std=0.05)
    else:
        add_mtp(target, "deepseek", std=0.05)
    llm = LLM(target, spec_type=spec_type, draft_model=draft, n_parallel=16, ctx_size=64, spec_draft_n_max=2,
              spec_draft_sample=True)
    assert_target_pair_distribution(llm, spec_type)
