"""What weight quantization costs in quality and buys in speed, on the bundled model.

For each --quant setting (none = the checkpoint's bfloat16, int8, and q8 on CPUs with int8 dot products) the script serves the bundled
model through the same kernels the engine uses and measures, side by side in one run:
  * held-out perplexity: the standard-library files the model never saw in training
    (specserve/train/corpus.py's split), in 1024-token windows, every position scored;
  * greedy decode tokens/s on the demo prompt at -t 1 and -t 2;
  * how many of the first 256 greedy tokens match the unquantized model's.
Prints a table, writes JSON and the Markdown table the documentation links
(docs/results/quant_quality.md; see benchmarks/results_table.py).

    .venv/bin/python benchmarks/quant_quality.py [--max-tokens N] [--out runs/quant_quality.json]
        [--table-out FILE] [--from-json FILE] [--note TEXT]
"""
from __future__ import annotations

import argparse
import math
import platform
import sys
from pathlib import Path

import torch
from tokenizers import Tokenizer

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from specserve import LLM, SamplingParams, kernels  # noqa: E402
from specserve.commands.demo import DEMO_PROMPT  # noqa: E402
from specserve.llm import BUNDLED_MODEL  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import results_table  # noqa: E402
from specserve.models.step_batch import StepBatch  # noqa: E402
from specserve.train import corpus  # noqa: E402

WINDOW = 1024


def held_out_tokens(max_tokens: int) -> torch.Tensor:
    root = corpus.stdlib_root()
    _, held = corpus.split_files(corpus.list_files(root))
    tokenizer = Tokenizer.from_file(str(BUNDLED_MODEL / "tokenizer.json"))
    ids = corpus.encode_files(tokenizer, root, held, ROOT / "runs" / "corpus_cache")
    return torch.from_numpy(ids[:max_tokens or None].astype("int64"))


def perplexity(llm: LLM, tokens: torch.Tensor) -> float:
    """exp(mean NLL) of every next token, window by window through the serving forward."""
    model, cache = llm.target, llm.engine.cache
    total_nll, count = 0.0, 0
    with torch.inference_mode():
        for start in range(0, tokens.shape[0] - 1, WINDOW):
            window = tokens[start:start + WINDOW + 1]
            if window.shape[0] < 2:
                break
            inputs, targets = window[:-1], window[1:]
            cache.clear(0)
            out = model.forward_step(StepBatch.build([(0, inputs, 0)], list(range(inputs.shape[0]))), cache)
            logp = torch.log_softmax(out.logits.float(), dim=-1)
            total_nll -= float(logp.gather(1, targets.unsqueeze(1)).sum())
            count += targets.shape[0]
    return math.exp(total_nll / count)


def decode(llm: LLM, n_tokens: int = 256) -> tuple[float, list[int]]:
    params = SamplingParams(temperature=0, max_tokens=n_tokens, ignore_eos=True)
    llm.generate(DEMO_PROMPT, params)
    outs = [llm.generate(DEMO_PROMPT, params)[0] for _ in range(3)]
    return max(o.timings["predicted_per_second"] for o in outs), outs[0].token_ids


def markdown_table(record: dict) -> str:
    out = ["| weights | packed MB | held-out perplexity | tok/s `-t 1` | tok/s `-t 2` | "
           "greedy tokens equal to bf16's |", "|---|---|---|---|---|---|"]
    for r in record["results"]:
        name = "bfloat16 (the checkpoint)" if r["quant"] == "none" else f"{r['quant']} (`--quant {r['quant']}`)"
        out.append(f"| {name} | {r['weights_mb']:.1f} | {r['perplexity']:.3f} | {r['tok_s_t1']:.0f} | "
                   f"{r['tok_s_t2']:.0f} | {r['same_greedy_tokens']}/256 |")
    return "\n".join(out)


def write_markdown(args, record: dict) -> None:
    conditions = (f"Held-out perplexity over {record['held_out_tokens']} tokens of standard-library files the "
                  f"bundled model never saw, scored through the serving kernels; decode speed on the demo prompt, "
                  f"one run, best of 3 requests.")
    results_table.write_table(args, "Weight quantization: quality and speed", markdown_table(record), conditions,
                              record.get("machine"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--max-tokens", type=int, default=0, help="held-out tokens to score (0 = all)")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "quant_quality.json")
    results_table.add_options(parser, "quant_quality")
    args = parser.parse_args()
    earlier = results_table.load_runs(args)
    if earlier is not None:
        write_markdown(args, earlier[-1])
        return 0
    tokens = held_out_tokens(args.max_tokens)
    rows, reference = [], None
    for quant in ("none", "int8") + (("q8",) if kernels.has_int8_dot() else ()):
        row = {"quant": quant}
        for threads in (1, 2):
            llm = LLM(None, threads=threads, quant=None if quant == "none" else quant, ctx_size=WINDOW)
            row[f"tok_s_t{threads}"], ids = decode(llm)
            reference = reference or ids
            row["same_greedy_tokens"] = next((i for i, (a, b) in enumerate(zip(ids, reference)) if a != b), len(ids))
        row["weights_mb"] = llm.target.native.stack.nbytes / 2**20
        row["perplexity"] = perplexity(llm, tokens)
        rows.append(row)
        print(row, flush=True)
    print(f"\nheld-out perplexity over {tokens.shape[0]} tokens of standard-library files the model never saw; "
          f"speeds: one run, best of 3 requests\n")
    record = {"machine": platform.platform(), "held_out_tokens": int(tokens.shape[0]), "results": rows}
    print(markdown_table(record))
    results_table.write_json(args.out, record)
    write_markdown(args, record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
