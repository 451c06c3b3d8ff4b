"""DFlash / DSpark draft checkpoints: format detection and one normalised description.

Three public layouts of the same network are read (docs/reference/dflash-dspark.md §1.1-§1.3, §3.6):

* z-lab `DFlashDraftModel`: backbone only (`fc`, `hidden_norm`, `layers.*`, `norm`), no embedding
  or head; `block_size` top-level or under `dflash_config`; bonus-anchor layout (B-1 drafts);
* DeepSpec `Qwen3DSparkModel`: the same backbone plus frozen `embed_tokens` / `lm_head` copies
  (ignored: the target's are used) and, for DSpark, `markov_head.*` and `confidence_head.proj.*`;
  every key top-level; anchor-first layout (B drafts) whether markov_rank is 0 (DFlash) or not;
* SpecForge `DSparkDraftModel`: DSpark keys in `dflash_config` or top-level, heads possibly
  nested under `logit_head.`; anchor-first;
* GGUF files of llama.cpp's `dflash` architecture (gguf_drafters.py turns them into the same config).

The draft stack itself is Qwen3-, Llama- or Qwen2-style (block_drafter_backbone.py decides which
from `model_type` and the tensors; the architecture class name plays no part).
An explicit `sample_from_anchor` key (written by `specserve convert-draft` and by our trainer)
decides the layout over the architecture's default; a user option decides over both.
The Markov and confidence heads are detected by their tensors, as llama.cpp does.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..errors import IncompatibleDraftError, ModelLoadError, OptionError
from .block_drafter_backbone import DRAFT_ARCHS, check_backbone_tensors, resolve_backbone_config
from .config import ModelConfig, config_from_dict, read_json, rope_settings
from .gguf_drafters import block_drafter_from_gguf
from .gguf_file import is_gguf
from .loader import Checkpoint

BONUS_ANCHOR = "bonus-anchor"     # z-lab: [anchor, MASK...] -> slots 1..B-1 predict anchor+1..anchor+B-1
ANCHOR_FIRST = "anchor-first"     # DeepSpec: slot k predicts the token after anchor+k -> B drafts
LAYOUTS = (BONUS_ANCHOR, ANCHOR_FIRST)

FORMAT_ZLAB = "zlab-dflash"
FORMAT_DEEPSPEC = "deepspec"
FORMAT_SPECFORGE = "specforge-dspark"
FORMAT_GGUF = "gguf"              # llama.cpp's `dflash` architecture (gguf_drafters.py)

_ARCH_FORMATS = {
    "DFlashDraftModel": (FORMAT_ZLAB, BONUS_ANCHOR),
    "Qwen3DSparkModel": (FORMAT_DEEPSPEC, ANCHOR_FIRST),
    "DSparkDraftModel": (FORMAT_SPECFORGE, ANCHOR_FIRST),
}

# checkpoint-only prefixes -> module names (older SpecForge exports nested the heads)
_KEY_PREFIXES = (("logit_head.markov_head.", "markov_head."),
                 ("logit_head.confidence_head.", "confidence_head."),
                 ("model.", ""))
# copies of the target's tensors that some formats ship; the target's own are used instead
SHARED_TENSORS = ("embed_tokens.weight", "lm_head.weight")
MARKOV_W1 = "markov_head.markov_w1.weight"
MARKOV_W2 = "markov_head.markov_w2.weight"
CONFIDENCE_W = "confidence_head.proj.weight"
CONFIDENCE_B = "confidence_head.proj.bias"


def build_target_layer_ids(num_target_layers: int, num_taps: int) -> list[int]:
    """Evenly spaced taps from layer 1 to layer T-3 (the DFlash paper's rule; Python rounding).

    Targets too shallow for that rule (fewer than num_taps + 3 layers) get taps spread evenly
    over layers 0..T-2 instead, at most T-1 of them.
    """
    if num_taps == 1:
        return [num_target_layers // 2]
    ids = [int(round(1 + i * (num_target_layers - 4) / (num_taps - 1))) for i in range(num_taps)]
    if ids[0] >= 0 and all(b > a for a, b in zip(ids, ids[1:])):
        return ids
    num_taps = max(1, min(num_taps, num_target_layers - 1))
    if num_taps == 1:
        return [0]
    return sorted({int(round(i * (num_target_layers - 2) / (num_taps - 1))) for i in range(num_taps)})


@dataclass
class BlockDrafterConfig:
    """Everything needed to build and serve one draft checkpoint, independent of its format."""
    model_dir: Path
    format: str
    layout: str
    block_size: int
    target_layer_ids: list[int]
    mask_token_id: int | None
    num_target_layers: int | None
    markov_rank: int
    has_confidence_head: bool
    confidence_with_markov: bool
    backbone: ModelConfig                            # the draft's layer stack (family: qwen3 / llama / qwen2)
    key_map: dict[str, str] = field(default_factory=dict)   # module name -> name in the checkpoint
    raw: dict = field(default_factory=dict, repr=False)
    checkpoint: Checkpoint | None = field(default=None, repr=False)
    backbone_from: str = "config"                    # how the backbone was decided: "config" or "tensors"

    @property
    def max_drafts(self) -> int:
        """Drafts one block can produce: B-1 (bonus-anchor) or B (anchor-first)."""
        return self.block_size - 1 if self.layout == BONUS_ANCHOR else self.block_size

    @property
    def method(self) -> str:
        return "dspark" if self.markov_rank > 0 else "dflash"


def _lookup(raw: dict, name: str, default=None):
    """A key from `dflash_config` if present there, else top-level (schema drift,
    docs/reference/dflash-dspark.md §1.1)."""
    nested = raw.get("dflash_config") or {}
    if isinstance(nested, dict) and nested.get(name) is not None:
        return nested[name]
    value = raw.get(name)
    return default if value is None else value


def _module_name(checkpoint_key: str) -> str:
    for old, new in _KEY_PREFIXES:
        if checkpoint_key.startswith(old):
            return new + checkpoint_key[len(old):]
    return checkpoint_key


def parse_layout(value: str | None) -> str | None:
    if value in (None, "", "auto"):
        return None
    if value not in LAYOUTS:
        raise ModelLoadError(f"unknown block layout {value!r}; use auto, {' or '.join(LAYOUTS)}")
    return value


def read_block_drafter(model_dir: str | Path, layout: str | None = None) -> BlockDrafterConfig:
    """Detect the format of a DFlash / DSpark folder and normalise its config."""
    model_dir = Path(model_dir)
    if is_gguf(model_dir):
        raw, checkpoint = block_drafter_from_gguf(model_dir)
        source = str(model_dir)
    else:
        if not model_dir.is_dir():
            raise ModelLoadError(f"draft model directory not found: {model_dir}")
        raw = read_json(model_dir / "config.json", "draft config.json")
        source = str(model_dir / "config.json")
        checkpoint = Checkpoint(model_dir)
    key_map = {_module_name(k): k for k in checkpoint.keys()}

    if "fc.weight" not in key_map or "hidden_norm.weight" not in key_map:
        raise ModelLoadError(f"{model_dir} is not a DFlash/DSpark draft: tensors fc.weight and "
                             f"hidden_norm.weight are missing (draft-dflash / draft-dspark need one)")
    arch = (raw.get("architectures") or [None])[0]
    fmt, default_layout = _ARCH_FORMATS.get(arch, (FORMAT_GGUF if is_gguf(model_dir) else "dflash-compatible", None))
    if default_layout is None:          # unknown class name: a Markov head means a DSpark export
        default_layout = ANCHOR_FIRST if MARKOV_W1 in key_map else BONUS_ANCHOR
    declared = _lookup(raw, "sample_from_anchor")
    chosen = parse_layout(layout) or (
        (ANCHOR_FIRST if declared else BONUS_ANCHOR) if declared is not None else default_layout)

    block_size = _lookup(raw, "block_size")
    if block_size is None:
        raise ModelLoadError(f"{source}: no block_size (top-level or under dflash_config)")
    num_layers_target = _lookup(raw, "num_target_layers")
    layer_ids = _lookup(raw, "target_layer_ids")
    if layer_ids is None:
        if num_layers_target is None:
            raise ModelLoadError(f"{source}: needs target_layer_ids or num_target_layers")
        layer_ids = build_target_layer_ids(int(num_layers_target), int(raw.get("num_hidden_layers", 1)))
    layer_ids = [int(i) for i in layer_ids]
    if any(b <= a for a, b in zip(layer_ids, layer_ids[1:])):
        raise ModelLoadError(f"{source}: target_layer_ids {layer_ids} must be strictly increasing")
    mask = _lookup(raw, "mask_token_id")

    head_type = str(_lookup(raw, "markov_head_type", "vanilla")).lower()
    markov_rank = 0
    if MARKOV_W1 in key_map:
        if head_type != "vanilla":
            raise ModelLoadError(f"{source}: markov_head_type {head_type!r} is not supported (only 'vanilla')")
        if MARKOV_W2 not in key_map:
            raise ModelLoadError(f"{model_dir}: {MARKOV_W1} present but {MARKOV_W2} missing")
        markov_rank = int(checkpoint.shape(key_map[MARKOV_W1])[1])
    declared_rank = int(_lookup(raw, "markov_rank", markov_rank) or 0)
    if declared_rank != markov_rank:
        raise ModelLoadError(f"{source}: markov_rank is {declared_rank} but the checkpoint's Markov head "
                             f"has rank {markov_rank}")

    backbone_raw, backbone_from = resolve_backbone_config(raw, key_map, source)
    backbone_raw.setdefault("tie_word_embeddings", False)
    for layer_type in raw.get("layer_types") or []:
        if layer_type != "full_attention":
            raise ModelLoadError(f"{source}: draft layer type {layer_type!r} is not supported "
                                 f"(only full_attention)")
    backbone = config_from_dict(backbone_raw, source)
    check_backbone_tensors(backbone, key_map, str(model_dir))

    has_conf = CONFIDENCE_W in key_map
    conf_with_markov = False
    if has_conf:
        width = int(checkpoint.shape(key_map[CONFIDENCE_W])[1])
        conf_with_markov = width == backbone.hidden_size + markov_rank and markov_rank > 0
        if width not in (backbone.hidden_size, backbone.hidden_size + markov_rank):
            raise ModelLoadError(f"{model_dir}: {CONFIDENCE_W} has input width {width}, expected "
                                 f"{backbone.hidden_size} or {backbone.hidden_size + markov_rank}")
    if markov_rank and backbone.vocab_size != int(checkpoint.shape(key_map[MARKOV_W1])[0]):
        raise ModelLoadError(f"{model_dir}: the Markov head has {checkpoint.shape(key_map[MARKOV_W1])[0]} rows "
                             f"but vocab_size is {backbone.vocab_size}")
    config = BlockDrafterConfig(model_dir, fmt, chosen, int(block_size), layer_ids,
                            None if mask is None else int(mask),
                            None if num_layers_target is None else int(num_layers_target),
                            markov_rank, has_conf, conf_with_markov, backbone, key_map, raw, checkpoint,
                            backbone_from)
    if config.block_size < (2 if chosen == BONUS_ANCHOR else 1):
        raise ModelLoadError(f"{source}: block_size {config.block_size} is too small for the {chosen} layout")
    return config


def check_compatible(config: BlockDrafterConfig, target_cfg: ModelConfig, tokenizer=None) -> None:
    """Raise IncompatibleDraftError when the draft cannot run on this target."""
    where = f"draft {config.model_dir}"
    if config.backbone.hidden_size != target_cfg.hidden_size:
        raise IncompatibleDraftError(
            f"{where}: hidden size {config.backbone.hidden_size} differs from the target's {target_cfg.hidden_size} "
            f"(the draft shares the target's embedding and lm_head)")
    if config.backbone.vocab_size != target_cfg.vocab_size:
        raise IncompatibleDraftError(
            f"{where}: vocab_size {config.backbone.vocab_size} differs from the target's {target_cfg.vocab_size}")
    for name in SHARED_TENSORS:
        if name in config.key_map:
            rows = int(config.checkpoint.shape(config.key_map[name])[0])
            if rows != target_cfg.vocab_size:
                raise IncompatibleDraftError(f"{where}: {name} has {rows} rows but the target's vocabulary has "
                                             f"{target_cfg.vocab_size}")
    n_layers = target_cfg.num_hidden_layers
    if config.num_target_layers is not None and config.num_target_layers != n_layers:
        raise IncompatibleDraftError(f"{where}: trained for a target with {config.num_target_layers} layers, "
                                     f"this target has {n_layers}")
    bad = [i for i in config.target_layer_ids if not -1 <= i < n_layers]
    if bad:
        raise IncompatibleDraftError(f"{where}: target_layer_ids {config.target_layer_ids} include {bad}, "
                                     f"outside the target's layers -1..{n_layers - 1}")
    fc_in = int(config.checkpoint.shape(config.key_map["fc.weight"])[1])
    if fc_in != len(config.target_layer_ids) * target_cfg.hidden_size:
        raise IncompatibleDraftError(f"{where}: fc.weight takes {fc_in} features, expected "
                                     f"{len(config.target_layer_ids)} taps x {target_cfg.hidden_size}")
    if config.mask_token_id is None and tokenizer is not None:
        for text in (tokenizer.special.get("mask_token"), "<|MASK|>", "<|mask|>"):
            token_id = tokenizer.token_to_id(text)
            if token_id is not None:
                config.mask_token_id = int(token_id)
                break
    if config.mask_token_id is None:
        raise IncompatibleDraftError(f"{where}: no mask_token_id in the config and no mask token in the "
                                     f"target's tokenizer")
    if not 0 <= config.mask_token_id < target_cfg.vocab_size:
        raise IncompatibleDraftError(f"{where}: mask_token_id {config.mask_token_id} has no embedding row in the "
                                     f"target (vocabulary size {target_cfg.vocab_size})")


def normalized_config(config: BlockDrafterConfig) -> dict:
    """A config with every key explicit (what `convert-draft` and the trainer write)."""
    b = config.backbone
    theta, scaling = rope_settings(config.raw)
    return {
        "architectures": ["Qwen3DSparkModel"],
        "model_type": b.family,
        "draft_method": config.method,
        "sample_from_anchor": config.layout == ANCHOR_FIRST,
        "block_size": config.block_size,
        "target_layer_ids": list(config.target_layer_ids),
        "num_target_layers": config.num_target_layers,
        "mask_token_id": config.mask_token_id,
        "markov_rank": config.markov_rank,
        "markov_head_type": "vanilla",
        "enable_confidence_head": config.has_confidence_head,
        "confidence_head_with_markov": config.confidence_with_markov,
        "hidden_size": b.hidden_size,
        "intermediate_size": b.intermediate_size,
        "num_hidden_layers": b.num_hidden_layers,
        "num_attention_heads": b.num_attention_heads,
        "num_key_value_heads": b.num_key_value_heads,
        "head_dim": b.head_dim,
        "hidden_act": b.hidden_act,
        "rms_norm_eps": b.rms_norm_eps,
        "rope_theta": theta,
        "rope_scaling": scaling,
        "max_position_embeddings": b.max_position_embeddings,
        "attention_bias": b.qkv_bias,
        "mlp_bias": b.mlp_bias,
        "layer_types": ["full_attention"] * b.num_hidden_layers,
        "tie_word_embeddings": False,
        "vocab_size": b.vocab_size,
        "torch_dtype": b.torch_dtype or "float32",
        "bos_token_id": b.bos_token_id,
        "eos_token_id": b.eos_token_ids[0] if len(b.eos_token_ids) == 1 else (b.eos_token_ids or None),
    }


def new_block_drafter_config(target_cfg: ModelConfig, *, block_size: int, num_layers: int, mask_token_id: int,
                           target_layer_ids: list[int] | None = None, num_taps: int = 3, markov_rank: int = 0,
                           confidence_head: bool = False, layout: str = ANCHOR_FIRST,
                           intermediate_size: int | None = None, num_attention_heads: int | None = None,
                           num_key_value_heads: int | None = None, head_dim: int | None = None,
                           draft_arch: str = "qwen3", model_dir: str | Path = ".") -> BlockDrafterConfig:
    """A config for a fresh drafter of `target_cfg` (hidden size, vocabulary and RoPE follow the target)
    whose layers are of the `draft_arch` family (qwen3, llama or qwen2, whatever the target's)."""
    if draft_arch not in DRAFT_ARCHS:
        raise OptionError(f"draft architecture must be one of {', '.join(DRAFT_ARCHS)}, got {draft_arch!r}")
    layer_ids = list(target_layer_ids or build_target_layer_ids(target_cfg.num_hidden_layers, num_taps))
    raw = {
        "architectures": ["Qwen3DSparkModel"], "model_type": draft_arch, "attention_bias": draft_arch == "qwen2",
        "vocab_size": target_cfg.vocab_size, "hidden_size": target_cfg.hidden_size,
        "intermediate_size": intermediate_size or target_cfg.intermediate_size,
        "num_hidden_layers": num_layers,
        "num_attention_heads": num_attention_heads or target_cfg.num_attention_heads,
        "num_key_value_heads": num_key_value_heads or target_cfg.num_key_value_heads,
        "head_dim": head_dim or target_cfg.head_dim, "hidden_act": "silu",
        "rms_norm_eps": target_cfg.rms_norm_eps, "max_position_embeddings": target_cfg.max_position_embeddings,
        "rope_theta": target_cfg.rope_theta, "rope_scaling": target_cfg.rope_scaling,
        "tie_word_embeddings": False, "torch_dtype": "float32", "bos_token_id": target_cfg.bos_token_id,
        "eos_token_id": target_cfg.eos_token_ids[0] if target_cfg.eos_token_ids else None,
    }
    backbone = config_from_dict(raw, "new drafter")
    config = BlockDrafterConfig(Path(model_dir), FORMAT_DEEPSPEC, layout, block_size, layer_ids, mask_token_id,
                            target_cfg.num_hidden_layers, markov_rank, confidence_head,
                            confidence_head and markov_rank > 0, backbone, {}, raw)
    config.raw = normalized_config(config)
    return config
