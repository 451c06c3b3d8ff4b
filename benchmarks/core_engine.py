"""Core engine benchmark: our decode speed vs transformers, batching, and ngram-simple.

One run, greedy, on the bundled model (or -m DIR), side by side:
  1. batch-1 decode tokens/s: ours vs transformers `generate()` (same weights, same threads);
  2. throughput with 8 parallel requests vs 8 requests one after another;
  3. ngram-simple speedup on a code-editing prompt (output checked identical).
Prints a table and writes JSON. Timings are best-of-N to damp noise from other processes.

    .venv/bin/python benchmarks/core_engine.py [--out runs/core_engine.json]
"""
from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import torch

from specserve import LLM, SamplingParams
from specserve import kernels
from specserve.commands.demo import DEMO_PROMPT
from specserve.llm import BUNDLED_MODEL

from prompt_sets import CODE_PROMPTS



def best_of(fn, repeats):
    results = [fn() for _ in range(repeats)]
    return max(results, key=lambda r: r["tokens_per_s"])


def ours_decode(llm, prompt_ids, n_tokens):
    def once():
        out = llm.generate(prompt_ids, SamplingParams(temperature=0, max_tokens=n_tokens, ignore_eos=True))[0]
        return {"tokens_per_s": out.timings["predicted_per_second"], "tokens": out.token_ids}
    return once


def hf_decode(hf, prompt_ids, n_tokens):
    ids = torch.tensor([prompt_ids])

    def once():
        with torch.no_grad():
            t0 = time.perf_counter()
            hf.generate(ids, max_new_tokens=1, do_sample=False, pad_token_id=0)
            t1 = time.perf_counter()
            out = hf.generate(ids, max_new_tokens=n_tokens, min_new_tokens=n_tokens, do_sample=False,
                              pad_token_id=0)
            t2 = time.perf_counter()
        decode_s = (t2 - t1) - (t1 - t0)
        return {"tokens_per_s": (n_tokens - 1) / decode_s, "tokens": out[0, len(prompt_ids):].tolist()}
    return once


def throughput(llm, prompts, n_tokens):
    params = SamplingParams(temperature=0, max_tokens=n_tokens, ignore_eos=True)

    def once():
        t0 = time.perf_counter()
        outs = llm.generate(prompts, params)
        wall = time.perf_counter() - t0
        return {"tokens_per_s": sum(len(o.token_ids) for o in outs) / wall, "wall_s": wall}
    return once


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-m", "--model", default=str(BUNDLED_MODEL))
    parser.add_argument("-n", "--n-tokens", type=int, default=200)
    parser.add_argument("-t", "--threads", type=int, default=1,
                        help="threads for both engines (default 1: it measures reliably on a shared machine; "
                             "0 = the physical cores)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default="runs/core_engine.json")
    args = parser.parse_args()
    kernels.set_threads(args.threads)
    from transformers import AutoModelForCausalLM

    rows, result = [], {"model": args.model, "threads": kernels.threads(), "machine": platform.processor()}
    single = LLM(args.model)
    prompt_ids = single.tokenizer.encode(CODE_PROMPTS[1])
    single.generate(prompt_ids, SamplingParams(temperature=0, max_tokens=8))          # warm-up
    hf = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
    hf_decode(hf, prompt_ids, 8)()
    ours = best_of(ours_decode(single, prompt_ids, args.n_tokens), args.repeats)
    torch.set_num_threads(kernels.threads())     # transformers computes with PyTorch's own threads
    theirs = best_of(hf_decode(hf, prompt_ids, args.n_tokens), args.repeats)
    torch.set_num_threads(1)
    same = ours["tokens"] == theirs["tokens"]
    rows.append(("batch-1 decode, transformers generate()", theirs["tokens_per_s"], 1.0, ""))
    rows.append(("batch-1 decode, specserve", ours["tokens_per_s"], ours["tokens_per_s"] / theirs["tokens_per_s"],
                 "same tokens" if same else "tokens differ"))
    result["batch1"] = {"transformers_tps": theirs["tokens_per_s"], "specserve_tps": ours["tokens_per_s"],
                        "speedup": ours["tokens_per_s"] / theirs["tokens_per_s"], "same_tokens": same}

    prompts = [single.tokenizer.encode(p) for p in CODE_PROMPTS]
    n_batch_tokens = max(32, args.n_tokens // 2)
    sequential = best_of(throughput(single, prompts, n_batch_tokens), max(1, args.repeats - 1))
    parallel_llm = LLM(args.model, n_parallel=8)
    parallel_llm.generate(prompts[:2], SamplingParams(temperature=0, max_tokens=4))
    parallel = best_of(throughput(parallel_llm, prompts, n_batch_tokens), max(1, args.repeats - 1))
    rows.append(("8 requests one after another", sequential["tokens_per_s"], 1.0, ""))
    rows.append(("8 requests on 8 slots", parallel["tokens_per_s"],
                 parallel["tokens_per_s"] / sequential["tokens_per_s"], ""))
    result["parallel8"] = {"sequential_tps": sequential["tokens_per_s"], "parallel_tps": parallel["tokens_per_s"],
                           "speedup": parallel["tokens_per_s"] / sequential["tokens_per_s"]}

    demo_ids = single.tokenizer.encode(DEMO_PROMPT)
    spec = LLM(args.model, spec_type="ngram-simple", spec_ngram_simple_size_n=4, spec_ngram_simple_size_m=32)
    spec.generate(demo_ids[:20], SamplingParams(temperature=0, max_tokens=4))
    base_edit = best_of(ours_decode(single, demo_ids, args.n_tokens), args.repeats)
    spec_edit = best_of(ours_decode(spec, demo_ids, args.n_tokens), args.repeats)
    same = base_edit["tokens"] == spec_edit["tokens"]
    rows.append(("code edit, no speculation", base_edit["tokens_per_s"], 1.0, ""))
    rows.append(("code edit, ngram-simple (n=4, m=32)", spec_edit["tokens_per_s"],
                 spec_edit["tokens_per_s"] / base_edit["tokens_per_s"], "same tokens" if same else "tokens differ"))
    result["ngram_simple_code_edit"] = {"baseline_tps": base_edit["tokens_per_s"], "spec_tps": spec_edit["tokens_per_s"],
                                        "speedup": spec_edit["tokens_per_s"] / base_edit["tokens_per_s"],
                                        "same_tokens": same, "stats": spec.stats_lines()}

    print(f"\ncore engine benchmark: {Path(args.model).name}, greedy, {args.n_tokens} tokens, "
          f"{kernels.threads()} threads\n")
    print(f"{'configuration':<42} {'tokens/s':>10} {'ratio':>7}  note")
    print("-" * 75)
    for name, tps, ratio, note in rows:
        print(f"{name:<42} {tps:10.1f} {ratio:6.2f}x  {note}")
    print("\n" + "\n".join(spec.stats_lines()))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
