"""README.md (model card) for the bundled model, filled in from the run's statistics."""
from __future__ import annotations


def _fmt_int(n: int) -> str:
    return f"{n:,}"


def render_model_card(info: dict) -> str:
    arch, cfg, train, tc = info["arch"], info["config"], info["train"], info["train_config"]
    held, sub = info["held_out"], info["train_subset"]
    emb = arch["vocab_size"] * arch["hidden_size"]
    samples = "\n\n".join(f"```python\n{prompt}{text}\n```" for prompt, text in info["samples"].items())
    resumed = (" This run was stopped and continued with `--resume`; the data order and"
               " schedule do not change across a resume." if info.get("resumed") else "")
    if info.get("resumed"):
        pipeline = " summed over the invocations (periodic evaluation and checkpoints included)"
    else:
        pipeline = f" (whole pipeline, tokenizer to model card: {info['pipeline_seconds'] / 60:.1f} min)"
    minutes = info["minutes_arg"]
    minutes_flag = "" if minutes == 60 else f" --minutes {minutes:g}"
    return f"""# stdlib-coder

A tiny Python code-completion model bundled with specserve so that tests, examples and
benchmarks have a real, trained target model without downloading anything. It uses the
Qwen3 architecture and loads in both specserve and transformers
(`AutoModelForCausalLM.from_pretrained(path)`). It is a toy: it writes plausible-looking
Python, not correct Python.

## Architecture

| | |
|---|---|
| architecture | `Qwen3ForCausalLM` (`model_type: qwen3`) |
| hidden size | {arch["hidden_size"]} |
| layers | {arch["num_hidden_layers"]} |
| attention heads | {arch["num_attention_heads"]} query heads, {arch["num_key_value_heads"]} KV heads, head_dim {arch["head_dim"]} (q/k RMSNorm) |
| MLP | SwiGLU, intermediate size {arch["intermediate_size"]} |
| vocabulary | {arch["vocab_size"]} (byte-level BPE) |
| context | {cfg["max_position_embeddings"]} tokens (trained at this length) |
| position encoding | RoPE, theta {arch["rope_theta"]:g} |
| norm | RMSNorm, eps {arch["rms_norm_eps"]:g} |
| embeddings | tied (input embedding = output head) |
| parameters | {_fmt_int(info["n_params"])} ({_fmt_int(emb)} in the embedding) |
| stored as | bfloat16 safetensors; specserve upcasts to float32 by default |

## Tokenizer

Byte-level BPE trained with the `tokenizers` library on the training split only;
{arch["vocab_size"]} tokens including two special tokens. Any UTF-8 text encodes and decodes
back exactly (no prefix space, no normalisation, no clean-up of spaces).

| id | token | use |
|---|---|---|
| 0 | `<|endoftext|>` | end of text, document separator, eos and pad |
| 1 | `<|mask|>` | reserved for block-diffusion drafters: its embedding row exists (so drafters can use it as an input), but it never occurs in the training data and must never be emitted |

There is no bos token; nothing is prepended to a prompt.

### Chat template

This is a completion model, so the chat template renders messages as raw text:

- a `system` message becomes Python comment lines: each line of its content is prefixed
  with `# ` and ends with a newline (a single trailing newline of the content is dropped first);
- `user` and `assistant` contents are copied verbatim;
- between two consecutive messages a single `\\n` is inserted when the previous rendered
  message does not already end with a newline;
- `add_generation_prompt` adds nothing: the model simply continues the text.

For example `[system: "Utilities.", user: "def add(a, b):"]` renders as
`"# Utilities.\\ndef add(a, b):"`.

## Training data

The `.py` files of the CPython {info["python_version"]} standard library (the `stdlib` path of
the interpreter, test packages included, `site-packages` excluded): {_fmt_int(info["n_files"])} files.
The split is by file: a file is held out iff
`int(sha1(relative_posix_path).hexdigest(), 16) % 20 == 0`.

| split | files | bytes | tokens |
|---|---|---|---|
| train | {_fmt_int(info["n_train_files"])} | {_fmt_int(info["train_bytes"])} | {_fmt_int(info["train_tokens"])} |
| held out | {_fmt_int(info["n_held_files"])} | {_fmt_int(info["held_bytes"])} | {_fmt_int(info["held_tokens"])} |

Documents are joined with `<|endoftext|>` into one stream and cut into windows of
{tc["seq_len"]} tokens (the window grid is shifted and reshuffled every epoch).
The standard library is distributed under the Python Software Foundation License.

## Training

```
python -m specserve.train.bundled_model --out specserve/bundled/stdlib-coder{minutes_flag}
```

(`--resume` continues an interrupted run from its last checkpoint; checkpoints are written
every {tc["checkpoint_minutes"]:g} minutes under `runs/`.) The step count is derived from
`--minutes` using a fixed nominal rate of {info["nominal_tokens_per_second"]} tokens/s, so
the result does not depend on the speed of the machine. Seeds and data order are fixed.{resumed}
Wall times below include periods when the two cores were shared with other jobs.

| | |
|---|---|
| steps | {_fmt_int(train["steps"])} × {tc["batch_size"]} sequences × {tc["seq_len"]} tokens |
| tokens seen | {_fmt_int(train["tokens_seen"])} ({train["epochs"]:.2f} epochs) |
| optimiser | AdamW, betas {tuple(tc["betas"])}, weight decay {tc["weight_decay"]} (matrices and embedding), grad clip {tc["grad_clip"]} |
| learning rate | {tc["lr"]:g}, {tc["warmup_steps"]} warmup steps, cosine decay to {tc["min_lr_ratio"]:g} × peak |
| precision | float32 master weights, bfloat16 autocast, `torch.compile` |
| hardware | 2 shared CPU cores (AVX-512 bf16), {info["threads"]} torch thread(s){" in the final invocation" if info.get("resumed") else ""}, torch {info["torch_version"]} |
| training wall time | {train["train_seconds"] / 60:.1f} min{pipeline} |
| average throughput | {train["tokens_seen"] / max(train["train_seconds"], 1e-9):,.0f} tokens/s |

## Evaluation

Next-token cross-entropy (nats per token) of the shipped bfloat16 weights run in float32,
over non-overlapping {tc["seq_len"]}-token windows (every token predicted once).

| | loss | perplexity | tokens |
|---|---|---|---|
| held-out files (all of them) | {held["loss"]:.4f} | {held["perplexity"]:.2f} | {_fmt_int(held["tokens"])} |
| train split ({info["train_eval_windows"]} evenly spaced windows) | {sub["loss"]:.4f} | {sub["perplexity"]:.2f} | {_fmt_int(sub["tokens"])} |

Held-out bits per byte of source: {info["held_out_bits_per_byte"]:.3f}.
Average training loss over the last 100 steps: {train["final_train_loss_avg100"]:.4f}.

## Samples

Greedy continuations of 48 tokens (prompt included). Like most models of this size,
greedy decoding soon falls into loops.

{samples}
"""
