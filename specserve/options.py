"""Command-line options with llama.cpp's names, each also settable from the environment.

Every option has an environment variable: llama.cpp's `LLAMA_ARG_*` name (derived from
the long flag unless llama.cpp uses another), also accepted as `SPECSERVE_*`. A flag on
the command line wins over the environment, which wins over the default.
Proposers declare their own options (specserve/option.py Option); they are added here too. The
sampling defaults are llama.cpp's (sampling.py LLAMA_CPP_DEFAULTS).
"""
from __future__ import annotations

import argparse
import dataclasses
import os

from .errors import OptionError
from .option import Option
from .sampling import LLAMA_CPP_DEFAULTS as SAMPLING
from .speculative.option_table import SPEC_OPTIONS
from .speculative.registry import all_options

MODEL_OPTIONS = [
    Option(("-m", "--model"), "model", str, None,
           "model folder (Hugging Face layout) or GGUF file; default: the bundled model", env="LLAMA_ARG_MODEL"),
    Option(("-c", "--ctx-size"), "ctx_size", int, 0,
           "context size per slot in tokens (0 = the model's max_position_embeddings)", env="LLAMA_ARG_CTX_SIZE"),
    Option(("-np", "--parallel"), "parallel", int, 1, "number of slots (requests decoded together)",
           env="LLAMA_ARG_N_PARALLEL"),
    Option(("-b", "--batch-size"), "batch_size", int, 512, "most rows in one target forward (prompt chunking)",
           env="LLAMA_ARG_BATCH"),
    Option(("-sps", "--slot-prompt-similarity"), "slot_prompt_similarity", float, 0.1,
           "a request takes the free slot whose last request shares the longest prefix with its prompt when "
           "that prefix is more than this fraction of the prompt, else the least recently used slot "
           "(0 = always the least recently used); it keeps a conversation's n-gram state"),
    Option(("--dtype",), "dtype", str, "auto",
           "dtype of weights and linear layers: auto (the checkpoint's; float16 runs as float32), float32, "
           "bfloat16 or float16; attention and the KV cache are always float32"),
    Option(("-t", "--threads"), "threads", int, 0,
           "CPU threads for the compute kernels (0 = the physical cores this process may run on)",
           env="LLAMA_ARG_THREADS"),
    Option(("--kernels",), "kernels", str, "auto",
           "compute kernels: auto (native on the CPU when they build, else PyTorch), native (the C++ kernels, "
           "compiled once per machine) or torch (PyTorch operations)", env="SPECSERVE_KERNELS"),
    Option(("-ctk", "--cache-type-k"), "cache_type_k", str, "f32",
           "KV cache element type of the keys: f32, f16 or bf16 (f16/bf16 halve the cache's memory and the "
           "bytes attention reads; native kernels only)", env="LLAMA_ARG_CACHE_TYPE_K"),
    Option(("-ctv", "--cache-type-v"), "cache_type_v", str, "f32",
           "KV cache element type of the values: f32, f16 or bf16 (native kernels only)",
           env="LLAMA_ARG_CACHE_TYPE_V"),
    Option(("--quant",), "quant", str, "none",
           "weight quantization of the target: none, int8 (weight-only, one scale per output row) or q8 (int8 "
           "weights and int8 rows, one scale per row, integer dot products on AVX-512 VNNI or AVX2); native kernels only. "
           "The quantized model is the one served: speculation stays lossless against it"),
]

SAMPLING_OPTIONS = [
    Option(("-n", "--n-predict"), "n_predict", int, -1, "tokens to generate (-1 = until EOS or the context is full)",
           env="LLAMA_ARG_N_PREDICT"),
    Option(("--temp",), "temp", float, SAMPLING.temperature, "temperature (<= 0: greedy)"),
    Option(("--top-k",), "top_k", int, SAMPLING.top_k, "top-k sampling (0 = disabled)"),
    Option(("--top-p",), "top_p", float, SAMPLING.top_p, "top-p sampling (1.0 = disabled)"),
    Option(("--min-p",), "min_p", float, SAMPLING.min_p, "min-p sampling (0.0 = disabled)"),
    Option(("-s", "--seed"), "seed", int, -1, "random seed (-1 = random)"),
    Option(("--ignore-eos",), "ignore_eos", bool, False, "keep generating after the end-of-sequence token"),
    Option(("--repeat-penalty",), "repeat_penalty", float, SAMPLING.repetition_penalty,
           "penalize tokens among the last --repeat-last-n: positive logits divided, negative multiplied "
           "(1.0 = disabled)"),
    Option(("--repeat-last-n",), "repeat_last_n", int, SAMPLING.penalty_last_n,
           "tokens of prompt and output the penalties look at (0 = disabled, -1 = all)"),
    Option(("--presence-penalty",), "presence_penalty", float, SAMPLING.presence_penalty,
           "subtracted once from the logit of every token among the last --repeat-last-n (0.0 = disabled)"),
    Option(("--frequency-penalty",), "frequency_penalty", float, SAMPLING.frequency_penalty,
           "subtracted per occurrence among the last --repeat-last-n (0.0 = disabled)"),
    Option(("-l", "--logit-bias"), "logit_bias", str, None,
           "token biases, a comma list of TOKEN_ID+BIAS or TOKEN_ID-BIAS (e.g. 15043+1,2-inf bans token 2)"),
]

def env_names(opt: Option) -> list[str]:
    long_flag = next((f for f in opt.flags if f.startswith("--")), opt.flags[0])
    derived = long_flag.lstrip("-").upper().replace("-", "_")
    llama = opt.env or f"LLAMA_ARG_{derived}"
    own = llama[len("LLAMA_ARG_"):] if llama.startswith("LLAMA_ARG_") else derived
    return [llama, "SPECSERVE_" + own]


def _convert(opt: Option, raw: str, source: str):
    if opt.type is bool:
        if raw.lower() in ("1", "true", "yes", "on", "enabled"):
            return True
        if raw.lower() in ("0", "false", "no", "off", "disabled", ""):
            return False
        raise OptionError(f"{source}: expected a boolean, got {raw!r}")
    try:
        return opt.type(raw)
    except ValueError:
        raise OptionError(f"{source}: expected {opt.type.__name__}, got {raw!r}") from None


def add_options(parser: argparse.ArgumentParser, options: list[Option], title: str,
                defaults: dict | None = None) -> None:
    """defaults: per-command overrides of option defaults, by dest name."""
    group = parser.add_argument_group(title)
    for opt in options:
        if defaults and opt.dest in defaults:
            opt = dataclasses.replace(opt, default=defaults[opt.dest])
        default = opt.default
        for name in env_names(opt):
            if name in os.environ:
                default = _convert(opt, os.environ[name], f"environment variable {name}")
                break
        envs = " / ".join(env_names(opt))
        if opt.type is bool:
            group.add_argument(*opt.flags, dest=opt.dest, action="store_true", default=default,
                               help=f"{opt.help} (env: {envs})")
        else:
            group.add_argument(*opt.flags, dest=opt.dest, type=opt.type, default=default,
                               help=f"{opt.help} (default: {opt.default}) (env: {envs})")


def add_engine_options(parser: argparse.ArgumentParser, defaults: dict | None = None) -> None:
    add_options(parser, MODEL_OPTIONS, "model and engine", defaults)
    add_options(parser, SAMPLING_OPTIONS, "sampling", defaults)
    add_options(parser, SPEC_OPTIONS, "speculative decoding", defaults)
    add_options(parser, all_options(), "speculative methods", defaults)


def spec_option_values(args: argparse.Namespace) -> dict:
    """All speculative option values by dest name (what proposers read)."""
    keys = [o.dest for o in SPEC_OPTIONS + all_options()]
    return {k: getattr(args, k) for k in keys if hasattr(args, k)}


def command_line(values: dict) -> list[str]:
    """Engine option values by dest name as `specserve serve` / `generate` arguments (each by its declared
    long flag; a true boolean is its flag alone, a false one left out)."""
    declared = {o.dest: o for o in MODEL_OPTIONS + SAMPLING_OPTIONS + SPEC_OPTIONS + all_options()}
    args = []
    for dest, value in values.items():
        if dest not in declared:
            raise OptionError(f"no command-line option for {dest!r}")
        opt = declared[dest]
        flag = next((f for f in opt.flags if f.startswith("--")), opt.flags[0])
        if opt.type is bool:
            args += [flag] if value else []
        elif value is not None:
            args += [flag, str(value)]
    return args
