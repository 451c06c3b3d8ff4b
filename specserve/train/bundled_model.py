"""Build the bundled tiny model end to end.

    python -m specserve.train.bundled_model --out specserve/bundled/stdlib-coder [--minutes M] [--resume]

Steps: train the tokenizer on the train split, tokenize both splits, pretrain, evaluate
the exported (bfloat16) weights on the held-out files, write the model folder and card.
The step count follows from --minutes through a fixed nominal throughput, never from the
measured speed, so a given command produces the same model on any machine.
"""
from __future__ import annotations

import argparse
import json
import math
import time
from dataclasses import asdict
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from tokenizers import Tokenizer

from ..models.transformer import CausalLM
from . import corpus
from .model_card import render_model_card
from .pretrain import TrainConfig, build_model, evaluate, train
from .tokenizer_train import save_tokenizer, train_tokenizer

ARCH = {
    "vocab_size": 4096,
    "hidden_size": 256,
    "intermediate_size": 768,
    "num_hidden_layers": 6,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "rope_theta": 10000.0,
    "rms_norm_eps": 1e-6,
}
SEQ_LEN = 1024
BATCH_SIZE = 4
# Training tokens per second assumed when turning --minutes into a step count
# (typical on a shared 2-core AVX-512 CPU with bfloat16 autocast and torch.compile).
NOMINAL_TOKENS_PER_SECOND = 5600
DEFAULT_MINUTES = 60.0
SEED = 1234
TRAIN_EVAL_WINDOWS = 128
# No trailing newline: the tokenizer merges a newline with the next line's indentation.
SAMPLE_PROMPTS = ("def fibonacci(n):",
                  'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n    if n < 2:')


def hf_config(arch: dict, max_positions: int) -> dict:
    """config.json for transformers' Qwen3ForCausalLM (and specserve's loader)."""
    layers = arch["num_hidden_layers"]
    return {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        **{k: v for k, v in arch.items() if k != "rope_theta"},
        "hidden_act": "silu",
        "max_position_embeddings": max_positions,
        "initializer_range": 0.02,
        "tie_word_embeddings": True,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "use_sliding_window": False,
        "sliding_window": None,
        "max_window_layers": layers,
        "layer_types": ["full_attention"] * layers,
        # Both spellings: older transformers read rope_theta, newer rope_parameters.
        "rope_theta": arch["rope_theta"],
        "rope_scaling": None,
        "rope_parameters": {"rope_type": "default", "rope_theta": arch["rope_theta"]},
        "use_cache": True,
        "bos_token_id": None,
        "eos_token_id": 0,
        "pad_token_id": 0,
        "torch_dtype": "bfloat16",
        "dtype": "bfloat16",
    }


def steps_for_minutes(minutes: float) -> int:
    return max(1, round(minutes * 60 * NOMINAL_TOKENS_PER_SECOND / (SEQ_LEN * BATCH_SIZE)))


def train_config(minutes: float) -> TrainConfig:
    steps = steps_for_minutes(minutes)
    return TrainConfig(steps=steps, seq_len=SEQ_LEN, batch_size=BATCH_SIZE, seed=SEED,
                       warmup_steps=min(200, max(1, steps // 10)), eval_every=min(500, max(1, steps // 4)))


def bf16_state(model: CausalLM) -> dict[str, torch.Tensor]:
    return {name: t.detach().to(torch.bfloat16).contiguous() for name, t in model.state_dict().items()}


def load_exported(config: dict, state: dict[str, torch.Tensor]) -> CausalLM:
    """A float32 model holding exactly the shipped (bfloat16-rounded) weights."""
    model = build_model(config, SEED)
    model.load_state_dict({k: v.float() for k, v in state.items()})
    return model.eval().requires_grad_(False)


@torch.no_grad()
def greedy_complete(model: CausalLM, tokenizer: Tokenizer, prompt: str, max_new_tokens: int = 48) -> str:
    ids = tokenizer.encode(prompt, add_special_tokens=False).ids
    eos, mask = tokenizer.token_to_id(corpus.EOS_TOKEN), tokenizer.token_to_id(corpus.MASK_TOKEN)
    out: list[int] = []
    for _ in range(max_new_tokens):
        context = (ids + out)[-model.config.max_position_embeddings:]
        hidden, _ = model.forward_full(torch.tensor([context]))
        logits = F.linear(hidden[0, -1], model.lm_head_weight)
        logits[mask] = float("-inf")                   # reserved, never emitted
        nxt = int(logits.argmax())
        if nxt == eos:
            break
        out.append(nxt)
    return tokenizer.decode(out, skip_special_tokens=False)


def write_model_folder(out_dir: Path, config: dict, state: dict, tokenizer: Tokenizer, card: str) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    save_file(state, str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    generation = {"eos_token_id": 0, "pad_token_id": 0, "max_length": config["max_position_embeddings"]}
    (out_dir / "generation_config.json").write_text(json.dumps(generation, indent=2) + "\n", encoding="utf-8")
    save_tokenizer(tokenizer, out_dir, config["max_position_embeddings"])
    (out_dir / "README.md").write_text(card, encoding="utf-8")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, type=Path, help="model folder to write")
    parser.add_argument("--minutes", type=float, default=DEFAULT_MINUTES,
                        help=f"training length, as minutes at {NOMINAL_TOKENS_PER_SECOND} tokens/s "
                             f"(default {DEFAULT_MINUTES:g})")
    parser.add_argument("--resume", action="store_true", help="continue from the work folder's checkpoint")
    parser.add_argument("--work", type=Path, default=None,
                        help="checkpoints, token cache and logs (default runs/<out folder name>)")
    parser.add_argument("--no-compile", action="store_true", help="skip torch.compile (slower)")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch intra-op threads (1 is faster on a CPU busy with other work)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    work = args.work or Path("runs") / args.out.name
    work.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()

    def log(msg: str) -> None:
        print(f"[{(time.monotonic() - started) / 60:6.2f} min] {msg}", flush=True)

    torch.manual_seed(SEED)
    root = corpus.stdlib_root()
    files = corpus.list_files(root)
    train_files, held_files = corpus.split_files(files)
    log(f"stdlib {root} (Python {corpus.python_version()}): {len(files)} files, "
        f"{len(train_files)} train, {len(held_files)} held out")
    tokenizer = train_tokenizer(corpus.iter_texts(root, train_files), vocab_size=ARCH["vocab_size"])
    log(f"tokenizer trained: {tokenizer.get_vocab_size()} tokens")
    train_tokens = corpus.encode_files(tokenizer, root, train_files, work / "cache")
    held_tokens = corpus.encode_files(tokenizer, root, held_files, work / "cache")
    train_bytes = sum((root / f).stat().st_size for f in train_files)
    held_bytes = sum((root / f).stat().st_size for f in held_files)
    log(f"tokens: {train_tokens.size} train, {held_tokens.size} held out")

    config = hf_config(ARCH, SEQ_LEN)
    model = build_model(config, SEED)
    n_params = sum(p.numel() for p in model.parameters())
    cfg = train_config(args.minutes)
    if args.no_compile:
        cfg.compile = False
    log(f"model: {n_params} parameters; {cfg.steps} steps of {cfg.tokens_per_step} tokens")
    stats = train(model, cfg, train_tokens, held_tokens, work, resume=args.resume, log=log)
    log(f"trained {stats['steps']} steps in {stats['train_seconds'] / 60:.1f} min")

    state = bf16_state(model)
    exported = load_exported(config, state)
    held = evaluate(exported, held_tokens, SEQ_LEN)
    train_eval = evaluate(exported, train_tokens, SEQ_LEN, max_windows=TRAIN_EVAL_WINDOWS)
    log(f"held-out loss {held['loss']:.4f} ppl {held['perplexity']:.2f} ({held['tokens']} tokens); "
        f"train-subset loss {train_eval['loss']:.4f}")
    samples = {p: greedy_complete(exported, tokenizer, p) for p in SAMPLE_PROMPTS}
    for prompt, text in samples.items():
        log(f"sample:\n{prompt}{text}")

    info = {
        "arch": ARCH, "config": config, "n_params": n_params, "train_config": asdict(cfg),
        "minutes_arg": args.minutes, "nominal_tokens_per_second": NOMINAL_TOKENS_PER_SECOND,
        "python_version": corpus.python_version(), "n_files": len(files),
        "n_train_files": len(train_files), "n_held_files": len(held_files),
        "train_tokens": int(train_tokens.size), "held_tokens": int(held_tokens.size),
        "train_bytes": train_bytes, "held_bytes": held_bytes, "train": stats,
        "held_out": held, "train_subset": train_eval,
        "held_out_bits_per_byte": held["loss"] * held["tokens"] / (held_bytes * math.log(2)),
        "train_eval_windows": TRAIN_EVAL_WINDOWS, "samples": samples,
        "torch_version": torch.__version__,
        "threads": torch.get_num_threads(), "resumed": args.resume, "pipeline_seconds": time.monotonic() - started,
    }
    (work / "stats.json").write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    write_model_folder(args.out, config, state, tokenizer, render_model_card(info))
    log(f"wrote {args.out} ({sum(p.stat().st_size for p in args.out.iterdir()) / 1e6:.1f} MB)")


if __name__ == "__main__":
    main()
