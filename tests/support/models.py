"""Builders for tiny random checkpoints in Hugging Face layout, and small test utilities."""
from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from specserve.models.config import config_from_dict
from specserve.models.transformer import CausalLM

CHATML = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + "
          "'<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")

TRAINING_TEXT = [
    "def add(a, b):\n    return a + b\n",
    "class Stack:\n    def __init__(self):\n        self.items = []\n    def push(self, x):\n        self.items.append(x)\n",
    "for i in range(10):\n    print(i, i * i)\n",
    "import os\nimport sys\n\nif __name__ == '__main__':\n    main()\n",
    "The quick brown fox jumps over the lazy dog. Zoë naïve café — ünïcödé ✓\n",
] * 20

SPECIAL = ["<|endoftext|>", "<|mask|>", "<|im_start|>", "<|im_end|>"]


def write_tokenizer(out: Path, vocab_size: int = 300, chat_template: str = CHATML) -> None:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(TRAINING_TEXT, trainer)
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>",
        "mask_token": "<|mask|>", "add_bos_token": False, "chat_template": chat_template,
        "model_max_length": 512}))


def tiny_config(family: str = "qwen3", vocab_size: int = 320, **overrides) -> dict:
    model_type = {"llama": "llama", "qwen2": "qwen2", "qwen3": "qwen3"}[family]
    arch = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM"}[family]
    cfg = {
        "architectures": [arch], "model_type": model_type, "vocab_size": vocab_size, "hidden_size": 64,
        "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 16, "max_position_embeddings": 512, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
        "tie_word_embeddings": family != "llama", "hidden_act": "silu", "torch_dtype": "float32",
        "eos_token_id": 0, "bos_token_id": None,
    }
    if family == "qwen2":
        cfg["use_sliding_window"] = False
    cfg.update(overrides)
    return cfg


def write_model(out: Path, family: str = "qwen3", seed: int = 0, std: float = 0.02, tokenizer: bool = True,
                shards: int = 1, dtype: torch.dtype = torch.float32, **overrides) -> Path:
    """A random checkpoint folder: config.json, safetensors (optionally sharded), tokenizer."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    raw = tiny_config(family, **overrides)
    model = CausalLM(config_from_dict(raw))
    model.init_weights(std=std, seed=seed)
    state = {k: v.detach().to(dtype).contiguous() for k, v in model.state_dict().items()}
    if shards == 1:
        save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    else:
        names = sorted(state)
        weight_map = {}
        for i in range(shards):
            part = names[i::shards]
            fname = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
            save_file({k: state[k] for k in part}, str(out / fname), metadata={"format": "pt"})
            weight_map.update({k: fname for k in part})
        (out / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    (out / "config.json").write_text(json.dumps(raw))
    (out / "generation_config.json").write_text(json.dumps({"eos_token_id": raw.get("eos_token_id", 0)}))
    if tokenizer:
        write_tokenizer(out)
    return out


def blas_is_row_invariant() -> bool:
    """Whether this machine's BLAS gives a row the same bits at 4 and at 128 rows, for a linear layer
    and a batched attention product (the PyTorch path's batch invariance rests on it)."""
    gen = torch.Generator().manual_seed(0)
    w, x = torch.randn(256, 256, generator=gen), torch.randn(128, 256, generator=gen)
    keys = torch.randn(1, 2, 16, 128, generator=gen)
    q = torch.randn(1, 2, 128, 16, generator=gen)
    linear_ok = torch.equal(torch.nn.functional.linear(x[:4], w)[0], torch.nn.functional.linear(x, w)[0])
    matmul_ok = torch.equal(torch.matmul(q[:, :, :8], keys)[:, :, 0], torch.matmul(q, keys)[:, :, 0])
    return linear_ok and matmul_ok
