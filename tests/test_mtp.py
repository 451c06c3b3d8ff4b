"""draft-mtp: DeepSeek-style nextn heads on Llama / Qwen2 / Qwen3 and MiMo mtp_layers, against a
reference forward; head-only folders merged over the target; errors; greedy losslessness."""
import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from support.model_drafters import add_mtp
from support.models import write_model
from support.reference_heads import mtp as ref_mtp
from support.prompts import DRAFTER_PROMPTS as PROMPTS
from specserve import LLM, SamplingParams
from specserve.errors import IncompatibleDraftError, ModelLoadError
from specserve.models.mtp_format import load_mtp_head, save_head_folder
from specserve.models.step_batch import StepBatch
from specserve.models.transformer import CausalLM

DS = {"enorm": "enorm.weight", "hnorm": "hnorm.weight", "eh_proj": "eh_proj.weight", "out_norm": "shared_head.norm.weight"}
MIMO = {"enorm": "token_layernorm.weight", "hnorm": "hidden_layernorm.weight", "eh_proj": "input_proj.weight",
        "out_norm": "final_layernorm.weight"}


@pytest.mark.parametrize("family,layout,own_head", [("qwen3", "deepseek", False), ("llama", "deepseek", True),
                                                     ("qwen2", "deepseek", False), ("qwen2", "mimo", False)])
def test_head_matches_reference_forward(tmp_path, family, layout, own_head):
    d = write_model(tmp_path, family, seed=6, std=0.1, tokenizer=False)
    written = add_mtp(d, layout, own_head=own_head)
    target = CausalLM.from_pretrained(d)
    head = load_mtp_head(target)
    assert head.hidden_first == (layout == "mimo")
    tokens = torch.randint(0, 320, (24,), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        final, _ = target.forward_full(tokens[None, :20])
    cfg = json.loads((d / "config.json").read_text())
    prefix = "model.layers.2." if layout == "deepseek" else "model.mtp_layers.0."
    tensors = {**load_file(str(d / "model.safetensors")), **written}
    head_w = tensors.get(prefix + "shared_head.head.weight", target.lm_head_weight)
    rows = tokens[1:24]
    ref = ref_mtp(tensors, prefix, DS if layout == "deepseek" else MIMO, cfg, final[0], rows, torch.arange(23),
                  target.model.embed_tokens.weight, head_w, hidden_first=layout == "mimo",
                  qk_norm=family == "qwen3", chain_from=20)
    cache = head.new_cache(2, 64)
    with torch.no_grad():
        logits, hidden = head.forward_step(StepBatch.build([(0, rows[:20], 0)], list(range(20))), final[0], cache)
        ours = [logits]
        for i in range(20, 23):
            logits, hidden = head.forward_step(StepBatch.build([(0, rows[i:i + 1], i)], [0]), hidden[-1:], cache)
            ours.append(logits)
    assert (torch.cat(ours) - ref).abs().max().item() < 1e-4


def test_head_only_folder_is_merged_over_the_target(tmp_path):
    d = write_model(tmp_path / "t", "qwen3", seed=6, std=0.1, tokenizer=False)
    with_head = write_model(tmp_path / "h", "qwen3", seed=6, std=0.1, tokenizer=False)
    add_mtp(with_head, "deepseek")
    target = CausalLM.from_pretrained(with_head)
    head = load_mtp_head(target)
    save_head_folder(head, with_head, tmp_path / "mtp")
    saved = load_file(str(tmp_path / "mtp" / "model.safetensors"))
    assert all(k.startswith("model.layers.2.") for k in saved) and "model.layers.2.eh_proj.weight" in saved
    assert json.loads((tmp_path / "mtp" / "config.json").read_text())["num_nextn_predict_layers"] == 1
    merged = load_mtp_head(CausalLM.from_pretrained(d), tmp_path / "mtp")
    for name, value in head.state_dict().items():
        assert torch.allclose(merged.state_dict()[name], value.to(torch.bfloat16).float()), name
    # served from the head-only folder
    params = SamplingParams(temperature=0, max_tokens=16, ignore_eos=True)
    ref = LLM(d).generate([[5, 6, 7]], params)[0].token_ids
    assert LLM(d, spec_type="draft-mtp", draft_model=tmp_path / "mtp").generate([[5, 6, 7]], params)[0].token_ids == ref


def test_errors(tmp_path):
    plain = write_model(tmp_path / "p", "qwen3", tokenizer=False)
    with pytest.raises(IncompatibleDraftError, match="has no MTP head"):
        LLM(plain, spec_type="draft-mtp")
    d = write_model(tmp_path / "d", "qwen3", tokenizer=False)
    add_mtp(d, "deepseek")
    tensors = load_file(str(d / "model.safetensors"))
    del tensors["model.layers.2.hnorm.weight"]
    save_file(tensors, str(d / "model.safetensors"))
    with pytest.raises(ModelLoadError, match="model.layers.2.hnorm.weight"):
        LLM(d, spec_type="draft-mtp")
    # a head folder made for a different backbone
    other = write_model(tmp_path / "o", "qwen3", hidden_size=96, head_dim=24, tokenizer=False)
    add_mtp(other, "deepseek")
    save_head_folder(load_mtp_head(CausalLM.from_pretrained(other)), other, tmp_path / "wide-mtp")
    with pytest.raises(IncompatibleDraftError, match="hidden_size = 96"):
        LLM(plain, spec_type="draft-mtp", draft_model=tmp_path / "wide-mtp")
    (tmp_path / "wide-mtp" / "config.json").unlink()
    with pytest.raises(IncompatibleDraftError, match="shape"):
        LLM(plain, spec_type="draft-mtp", draft_model=tmp_path / "wide-mtp")


@pytest.mark.parametrize("layout", ["deepseek", "mimo"])
def test_greedy_identical_with_and_without_mtp(tmp_path, layout):
    d = write_model(tmp_path, "qwen2" if layout == "mimo" else "qwen3", seed=1, std=0.25, tokenizer=False)
    add_mtp(d, layout)
    params = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)
    reference = [o.token_ids for o in LLM(d).generate(PROMPTS, params)]
    for n_parallel in (1, 4):
        llm = LLM(d, spec_type="draft-mtp", n_parallel=n_parallel, spec_draft_n_max=3)
        for order in (list(range(len(PROMPTS))), list(reversed(range(len(PROMPTS))))):
            outs = llm.generate([PROMPTS[i] for i in order], params)
            assert [o.token_ids for o in outs] == [reference[i] for i in order]
        assert llm.engine.driver.stats_dict()["draft-mtp"]["n_gen_tokens"] > 0
