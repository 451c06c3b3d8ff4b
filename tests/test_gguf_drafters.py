"""GGUF drafters: draft-simple, EAGLE-3, DFlash and DSpark drafts written by `export-gguf` load back to the
same networks and draft exactly what their folders draft; what llama.cpp cannot run (MTP heads, EAGLE-3.1
extras, non-Qwen3 block-draft layers) is refused with the reason."""
import pytest
import torch

from support.block_drafters import write_block_drafter
from support.model_drafters import write_eagle3
from support.models import write_model
from support.prompts import BLOCK_PROMPTS, DRAFTER_PROMPTS
from specserve import LLM, SamplingParams
from specserve.bundled import STDLIB_CODER_DRAFTERS
from specserve.cli import main
from specserve.errors import ModelLoadError
from specserve.models.block_drafter import load_block_drafter
from specserve.models.block_drafter_format import ANCHOR_FIRST, BONUS_ANCHOR
from specserve.models.eagle3_format import load_eagle3
from specserve.models.gguf_export import export_gguf
from specserve.models.gguf_writer import parse_outtype
from specserve.models.tokenizer import Tokenizer
from specserve.models.transformer import CausalLM

GREEDY = SamplingParams(temperature=0, max_tokens=20, ignore_eos=True)
F32 = parse_outtype("f32")


@pytest.fixture(scope="module")
def target_dir(tmp_path_factory):
    return write_model(tmp_path_factory.mktemp("t6"), "qwen3", seed=4, std=0.25, num_hidden_layers=6)


@pytest.fixture(scope="module")
def target(target_dir):
    return CausalLM.from_pretrained(target_dir, dtype="float32")


def _same_state(a: torch.nn.Module, b: torch.nn.Module) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for name in sa:
        assert torch.equal(sa[name], sb[name]), name


def _run(target_dir, spec_type, draft, prompts, **options):
    llm = LLM(target_dir, spec_type=spec_type, draft_model=draft, n_parallel=2, **options)
    tokens = [o.token_ids for o in llm.generate(prompts, GREEDY)]
    stats = llm.engine.driver.stats_dict()[spec_type]
    return tokens, (stats["n_gen_tokens"], stats["n_acc_tokens"])


def test_draft_simple_gguf_drafts_like_its_folder(tmp_path, target_dir):
    draft = write_model(tmp_path / "draft", "qwen3", seed=4, std=0.25, num_hidden_layers=1)
    gguf = tmp_path / "draft.gguf"
    export_gguf(draft, gguf, F32)
    folder_run, gguf_run = (_run(target_dir, "draft-simple", d, DRAFTER_PROMPTS) for d in (draft, gguf))
    assert folder_run == gguf_run and folder_run[1][0] > 0


@pytest.mark.parametrize("kwargs", [dict(draft_vocab=200, norm_before_residual=True),
                                    dict(own_embedding=True, norm_before_fc=True)])
def test_eagle3_gguf_is_the_same_head(tmp_path, target_dir, target, kwargs):
    folder = write_eagle3(tmp_path / "e3", target_dir, "specforge", layer_ids=[1, 3, 4], **kwargs)
    gguf = tmp_path / "e3.gguf"
    export_gguf(folder, gguf, F32, target_dir)
    (head_a, taps_a), (head_b, taps_b) = load_eagle3(folder, target), load_eagle3(gguf, target)
    assert taps_a == taps_b == (1, 3, 4)
    assert head_a.opts == head_b.opts
    _same_state(head_a, head_b)
    folder_run, gguf_run = (_run(target_dir, "draft-eagle3", d, DRAFTER_PROMPTS, spec_draft_n_max=3)
                            for d in (folder, gguf))
    assert folder_run == gguf_run and folder_run[1][0] > 0


@pytest.mark.parametrize("spec_type,layout,kwargs", [
    ("draft-dflash", ANCHOR_FIRST, {}),
    ("draft-dflash", BONUS_ANCHOR, {}),
    ("draft-dspark", ANCHOR_FIRST, dict(markov_rank=8, confidence=True)),
])
def test_block_drafter_gguf_is_the_same_network(tmp_path, target_dir, target, spec_type, layout, kwargs):
    folder = write_block_drafter(tmp_path / "b", target_dir, "specserve", layout=layout,
                                 target_layer_ids=[0, 2, 4], **kwargs)
    gguf = tmp_path / "b.gguf"
    export_gguf(folder, gguf, F32, target_dir)
    tokenizer = Tokenizer(target_dir)
    a = load_block_drafter(folder, target, tokenizer=tokenizer)
    b = load_block_drafter(gguf, target, tokenizer=tokenizer)
    for field in ("layout", "block_size", "target_layer_ids", "mask_token_id", "markov_rank", "has_confidence_head",
                  "confidence_with_markov"):
        assert getattr(a.config, field) == getattr(b.config, field), field
    assert b.config.format == "gguf"
    _same_state(a, b)
    folder_run, gguf_run = (_run(target_dir, spec_type, d, BLOCK_PROMPTS) for d in (folder, gguf))
    assert folder_run == gguf_run and folder_run[1][0] > 0


def test_what_llama_cpp_cannot_run_is_refused(tmp_path, target_dir):
    for name, kwargs, reason in (("nout", dict(norm_output=True), "norm_output"),
                                 ("fcn", dict(fc_norm=True), "fc_norm"),
                                 ("q3", dict(model_type="qwen3"), "q/k norms")):
        folder = write_eagle3(tmp_path / name, target_dir, "specforge", **kwargs)
        with pytest.raises(ModelLoadError, match=reason):
            export_gguf(folder, tmp_path / f"{name}.gguf", F32, target_dir)
    llama_stack = write_block_drafter(tmp_path / "bl", target_dir, "specserve", draft_arch="llama")
    with pytest.raises(ModelLoadError, match="Qwen3-style layers"):
        export_gguf(llama_stack, tmp_path / "bl.gguf", F32, target_dir)
    with pytest.raises(ModelLoadError, match="--target-model-dir"):
        export_gguf(llama_stack, tmp_path / "bl.gguf", F32)
    last_layer = write_block_drafter(tmp_path / "ll", target_dir, "specserve", target_layer_ids=[1, 3, 5])
    with pytest.raises(ModelLoadError, match="reads the target's last layer"):
        export_gguf(last_layer, tmp_path / "ll.gguf", F32, target_dir)


def test_mtp_heads_have_no_gguf_form(tmp_path, target_dir, capsys):
    mtp_folder = STDLIB_CODER_DRAFTERS["draft-mtp"][0]
    with pytest.raises(ModelLoadError, match="MTP head .*llama.cpp cannot serve it"):
        export_gguf(mtp_folder, tmp_path / "mtp.gguf", F32)
    assert main(["export-gguf", str(mtp_folder), "-o", str(tmp_path / "mtp.gguf")]) == 1
    assert "llama.cpp cannot serve it" in capsys.readouterr().err
    gguf = tmp_path / "target.gguf"
    export_gguf(target_dir, gguf, F32)
    with pytest.raises(ModelLoadError, match="draft-mtp reads MTP heads from safetensors folders only"):
        LLM(target_dir, spec_type="draft-mtp", draft_model=gguf)


def test_export_gguf_command(tmp_path, target_dir, capsys):
    out = tmp_path / "t.gguf"
    assert main(["export-gguf", str(target_dir), "-o", str(out), "--outtype", "bf16"]) == 0
    assert "wrote" in capsys.readouterr().out
    assert CausalLM.from_pretrained(out).dtype == torch.bfloat16
    drafter = write_block_drafter(tmp_path / "b", target_dir, "specserve", markov_rank=4)
    assert main(["export-gguf", str(drafter), "-o", str(tmp_path / "b.gguf"), "--target-model-dir",
                 str(target_dir)]) == 0
    # a drafter checked against the wrong target (the bundled model, by default) is an error naming why
    assert main(["export-gguf", str(drafter), "-o", str(tmp_path / "c.gguf")]) == 1
    assert "error:" in capsys.readouterr().err
