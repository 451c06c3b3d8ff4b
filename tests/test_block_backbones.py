"""Draft backbones beyond Qwen3 (Llama-style, Qwen2-style): detected from config.json and the tensors
in every checkpoint format, loaded tensor for tensor, the mismatch errors naming the tensor, and
save_block_drafter / convert-draft writing the backbone explicitly."""
import json

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from support.block_drafters import DRAFT_ARCHS, FORMATS, random_block_drafter, write_block_drafter
from support.models import write_model
from specserve.cli import main
from specserve.errors import ModelLoadError, OptionError
from specserve.models.block_drafter import load_block_drafter, save_block_drafter
from specserve.models.block_drafter_format import new_block_drafter_config, read_block_drafter
from specserve.models.config import load_config
from specserve.models.transformer import CausalLM

DSPARK = dict(markov_rank=8, confidence=True)
HEADS = {"zlab": {}, "deepspec": {}, "specforge": DSPARK, "specforge-legacy": DSPARK, "specserve": DSPARK}


@pytest.fixture(scope="module")
def target_dir(tmp_path_factory):
    return write_model(tmp_path_factory.mktemp("target"), "qwen3", seed=3, std=0.2, num_hidden_layers=4)


@pytest.fixture(scope="module")
def target(target_dir):
    return CausalLM.from_pretrained(target_dir)


def _block_rows(drafter, target):
    """One block after a 12-token context, through the serving forward: [nb, H]."""
    tokens = list(range(10, 23))
    ids = drafter.config.target_layer_ids
    n_ctx, nb = len(tokens) - 1, drafter.config.block_size
    block = torch.full((1, nb), drafter.config.mask_token_id)
    block[0, 0] = tokens[-1]
    with torch.inference_mode():
        _, taps = target.forward_full(torch.tensor([tokens[:-1]]), taps=ids)
        feats = torch.cat([taps[i] for i in ids], dim=-1)[0]
        out = drafter.forward_cached(drafter.new_cache(1, 32), feats, torch.zeros(n_ctx, dtype=torch.int64),
                                     torch.arange(n_ctx), [0], torch.tensor([n_ctx]), block)[0]
    assert out.shape == (nb, target.config.hidden_size) and torch.isfinite(out).all()
    return out


def _reference(target_dir, target, draft_arch, **kwargs):
    """The in-memory drafter write_block_drafter saved (same seed), attached to the target."""
    model = random_block_drafter(target_dir, block_size=5, draft_arch=draft_arch, **kwargs)
    model.attach_target(target)
    return model.eval().requires_grad_(False)


def _edit_config(d, drop=(), **changes):
    cfg = json.loads((d / "config.json").read_text())
    cfg.update(changes)
    for key in drop:
        cfg.pop(key, None)
    (d / "config.json").write_text(json.dumps(cfg))


def _drop_tensors(d, *names):
    state = load_file(str(d / "model.safetensors"))
    for name in names:
        del state[name]
    save_file(state, str(d / "model.safetensors"))


@pytest.mark.parametrize("declared", ["own", "qwen3-template"])
@pytest.mark.parametrize("draft_arch", ["llama", "qwen2"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_with_every_backbone(tmp_path, target_dir, target, fmt, draft_arch, declared):
    """`own`: config.json names the backbone; `qwen3-template`: it says qwen3 / attention_bias false
    (configs built from a Qwen3 template) and the tensors decide."""
    d = write_block_drafter(tmp_path / "d", target_dir, fmt, block_size=5, draft_arch=draft_arch, **HEADS[fmt])
    if declared == "qwen3-template":
        _edit_config(d, model_type="qwen3", attention_bias=False)
    drafter = load_block_drafter(d, target)
    backbone = drafter.config.backbone
    assert (backbone.family, backbone.qk_norm, backbone.qkv_bias, backbone.o_bias) == \
           (draft_arch, False, draft_arch == "qwen2", False)
    assert drafter.config.backbone_from == ("config" if declared == "own" else "tensors")
    attn = drafter.layers[0].self_attn
    assert not hasattr(attn, "q_norm") and (attn.q_proj.bias is not None) == (draft_arch == "qwen2")
    # every tensor (biases included) reached its place: the same rows as the drafter that was written
    reference = _reference(target_dir, target, draft_arch, **HEADS[fmt])
    assert torch.equal(_block_rows(drafter, target), _block_rows(reference, target))


@pytest.mark.parametrize("draft_arch", DRAFT_ARCHS)
def test_unknown_or_missing_model_type_is_decided_by_tensors(tmp_path, target_dir, target, draft_arch):
    d = write_block_drafter(tmp_path / "a", target_dir, "zlab", block_size=5, draft_arch=draft_arch,
                            model_type="dflash_draft", variant="model-prefix")
    config = read_block_drafter(d)
    assert (config.backbone.family, config.backbone_from) == (draft_arch, "tensors")
    _edit_config(d, drop=("model_type", "attention_bias"))
    assert read_block_drafter(d).backbone.family == draft_arch
    assert torch.equal(_block_rows(load_block_drafter(d, target), target),
                       _block_rows(_reference(target_dir, target, draft_arch), target))


def test_backbone_mismatches_fail_clearly(tmp_path, target_dir):
    def draft(name, arch, fmt="deepspec", **kwargs):
        return write_block_drafter(tmp_path / name, target_dir, fmt, block_size=4, draft_arch=arch, **kwargs)

    q_norm, q_bias = "'layers.0.self_attn.q_norm.weight'", "'layers.0.self_attn.q_proj.bias'"
    for declared in ("llama", "qwen2"):      # a declared non-Qwen3 family with Qwen3 tensors
        with pytest.raises(ModelLoadError, match=f"model_type '{declared}' .* but the checkpoint has {q_norm} "
                                                 f"\\(a Qwen3-style draft\\): set model_type qwen3"):
            read_block_drafter(draft(f"q3-as-{declared}", "qwen3", model_type=declared))
    # specserve's own configs state the backbone: qwen3 there means the q/k norms must be present
    saved = save_block_drafter(random_block_drafter(target_dir, draft_arch="llama"), tmp_path / "saved",
                               torch.float32)
    _edit_config(saved, model_type="qwen3")
    with pytest.raises(ModelLoadError, match=f"model_type 'qwen3' .* tensor {q_norm} is missing .* "
                                             f"set model_type llama"):
        read_block_drafter(saved)
    # one layer without its k_norm
    partial = draft("partial", "qwen3")
    _drop_tensors(partial, "layers.1.self_attn.k_norm.weight")
    with pytest.raises(ModelLoadError, match="Qwen3-style .* tensor 'layers.1.self_attn.k_norm.weight' is missing"):
        read_block_drafter(partial)
    # a Qwen2 config without the biases, and a Llama config with them
    no_bias = draft("qwen2-no-v-bias", "qwen2")
    _drop_tensors(no_bias, "layers.1.self_attn.v_proj.bias")
    with pytest.raises(ModelLoadError, match="Qwen2-style .* tensor 'layers.1.self_attn.v_proj.bias' is missing"):
        read_block_drafter(no_bias)
    as_llama = draft("qwen2-as-llama", "qwen2")
    _edit_config(as_llama, model_type="llama", attention_bias=False)
    with pytest.raises(ModelLoadError, match=f"model_type llama, attention_bias false.* has {q_bias}"):
        read_block_drafter(as_llama)
    _edit_config(as_llama, attention_bias=True)          # Llama with attention_bias: o_proj has a bias too
    with pytest.raises(ModelLoadError,
                       match="attention_bias true.* tensor 'layers.0.self_attn.o_proj.bias' is missing"):
        read_block_drafter(as_llama)
    as_no_bias = draft("qwen2-bias-false", "qwen2")
    _edit_config(as_no_bias, attention_bias=False)
    with pytest.raises(ModelLoadError, match=f"model_type qwen2, attention_bias false.* has {q_bias}"):
        read_block_drafter(as_no_bias)
    with pytest.raises(OptionError, match="draft architecture must be one of qwen3, llama, qwen2, got 'gemma'"):
        new_block_drafter_config(load_config(target_dir), block_size=4, num_layers=1, mask_token_id=1,
                               draft_arch="gemma")


@pytest.mark.parametrize("draft_arch", DRAFT_ARCHS)
def test_saved_config_states_the_backbone(tmp_path, target_dir, draft_arch):
    out = save_block_drafter(random_block_drafter(target_dir, draft_arch=draft_arch, **DSPARK), tmp_path / "d")
    cfg = json.loads((out / "config.json").read_text())
    assert (cfg["model_type"], cfg["attention_bias"], cfg["mlp_bias"]) == (draft_arch, draft_arch == "qwen2", False)
    config = read_block_drafter(out)
    assert (config.backbone.family, config.backbone_from) == (draft_arch, "config")
    with safe_open(str(out / "model.safetensors"), "pt") as f:       # only the tiny confidence head in float32
        dtypes = {name: f.get_slice(name).get_dtype() for name in f.keys()}
    assert {n for n, d in dtypes.items() if d != "BF16"} == {n for n in dtypes if n.startswith("confidence_head.")}
    assert "markov_head.markov_w2.weight" in dtypes


@pytest.mark.parametrize("draft_arch", ["llama", "qwen2"])
def test_convert_draft_writes_the_detected_backbone(tmp_path, target_dir, target, draft_arch, capsys):
    src = write_block_drafter(tmp_path / "src", target_dir, "zlab", block_size=5, draft_arch=draft_arch)
    _edit_config(src, model_type="qwen3", attention_bias=False)          # z-lab's Qwen3 template
    dst = tmp_path / "dst"
    assert main(["convert-draft", str(src), "--target-model-dir", str(target_dir), "--out", str(dst),
                 "--dtype", "float32"]) == 0
    assert f"{draft_arch} backbone (from the tensors)" in capsys.readouterr().out
    cfg = json.loads((dst / "config.json").read_text())
    assert (cfg["model_type"], cfg["attention_bias"]) == (draft_arch, draft_arch == "qwen2")
    converted = load_block_drafter(dst, target)
    assert (converted.config.backbone.family, converted.config.backbone_from) == (draft_arch, "config")
    assert torch.equal(_block_rows(converted, target), _block_rows(load_block_drafter(src, target), target))
