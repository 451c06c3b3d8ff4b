"""Block-drafter backbones: one DFlash (or DSpark) recipe with Qwen3-, Llama- and Qwen2-style draft
layers (`--draft-arch`), trained for the same steps on the same target-regenerated data, side by side.

Per configuration: the training time, the held-out estimates after training (tau_prob at T=1,
tau_greedy at T=0), then served at T=0 on the code prompts: tau, draft time per verification
step, throughput, the speedup over no speculation, and whether the output is identical to it.
`qwen3+init` is the default recipe (layers copied from the target's top); the others start from
a random initialisation, which the Llama- and Qwen2-style drafts of a Qwen3 target must do, so
`qwen3` vs `llama` vs `qwen2` compares the backbones alone. Prints a table, writes JSON and the
Markdown table the documentation links (docs/results/block_backbones.md; see benchmarks/results_table.py).

    .venv/bin/python benchmarks/block_backbones.py [--steps 200] [--data runs/regen-400.npz] \\
        [--out runs/block_backbones.json] [--table-out FILE] [--from-json FILE] [--note TEXT]
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path


from specserve import LLM, SamplingParams
from specserve import kernels
from specserve.llm import BUNDLED_MODEL
from specserve.train.block_trainer import BlockTrainConfig, BlockTrainer
from specserve.train.regen_data import build_regen_dataset, load_regen_dataset

from block_drafters import run_cell
from prompt_sets import CODE_PROMPTS
import results_table

# name -> (draft_arch, init_from_target)
CONFIGS = {"qwen3+init": ("qwen3", True), "qwen3": ("qwen3", False), "llama": ("llama", False),
           "qwen2": ("qwen2", False)}


def train(args, name: str, samples) -> tuple[Path, dict, float]:
    arch, init = CONFIGS[name]
    out = Path(args.work) / f"{args.method}-{name}-{args.steps}"
    cfg = BlockTrainConfig(method=args.method, target_dir=args.model, out_dir=str(out), steps=args.steps,
                           batch_size=4, max_len=320, anchors=64, block_size=args.block_size, num_layers=2,
                           lr=2e-3, draft_arch=arch, init_from_target=init, checkpoint_every=args.steps, seed=0)
    t0 = time.perf_counter()
    final = BlockTrainer(cfg, samples, progress=False).train()      # resumes (and skips) a finished run
    return out, final, time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-m", "--model", default=str(BUNDLED_MODEL))
    parser.add_argument("--method", default="dflash", choices=["dflash", "dspark"])
    parser.add_argument("--configs", default=",".join(CONFIGS), help=f"comma list of {', '.join(CONFIGS)}")
    parser.add_argument("--data", default="runs/regen-400.npz", help="regen_data file (built when missing)")
    parser.add_argument("--data-samples", type=int, default=400)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--block-size", type=int, default=8)
    parser.add_argument("-n", "--n-tokens", type=int, default=96)
    parser.add_argument("--parallel", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("-t", "--threads", type=int, default=1)
    parser.add_argument("--work", default="runs/block_backbones", help="folder for the trained drafters")
    parser.add_argument("--out", default="runs/block_backbones.json")
    results_table.add_options(parser, "block_backbones")
    args = parser.parse_args()
    earlier = results_table.load_runs(args)
    if earlier is not None:
        write_markdown(args, earlier[-1])
        return
    kernels.set_threads(args.threads)
    names = [c.strip() for c in args.configs.split(",") if c.strip()]
    if Path(args.data).is_file():          # the user's data as it is
        samples = load_regen_dataset(args.data)
    else:
        samples = build_regen_dataset(args.model, args.data, n_samples=args.data_samples, progress=False)

    rows = []
    baseline = LLM(args.model, n_parallel=args.parallel)
    prompts = [baseline.tokenizer.encode(p) for p in CODE_PROMPTS]
    base = max((run_cell(baseline, prompts, 0.0, args.n_tokens) for _ in range(args.repeats)),
               key=lambda r: r["tokens_per_s"])
    for name in names:
        out, final, train_s = train(args, name, samples)
        llm = LLM(args.model, draft_model=out, spec_type=f"draft-{args.method}", n_parallel=args.parallel,
                  spec_draft_n_max=args.block_size)
        llm.generate(prompts[0], SamplingParams(temperature=0, max_tokens=8))           # warm-up
        served = max((run_cell(llm, prompts, 0.0, args.n_tokens) for _ in range(args.repeats)),
                     key=lambda r: r["tokens_per_s"])
        n_params = sum(p.numel() for p in llm.engine.driver.proposers[0].drafter.parameters())
        rows.append({"config": name, "draft_arch": CONFIGS[name][0], "init_from_target": CONFIGS[name][1],
                     "params_m": n_params / 1e6, "train_s": train_s,
                     "eval_tau_prob": final.get("tau_prob"), "eval_tau_greedy": final.get("tau_greedy"),
                     "served_tau": served["tau"], "draft_ms_per_step": served["draft_ms_per_step"],
                     "tokens_per_s": served["tokens_per_s"], "speedup": served["tokens_per_s"] / base["tokens_per_s"],
                     "identical_to_baseline": served["tokens"] == base["tokens"]})

    print(f"\nblock-drafter backbones: {args.method}, target {Path(args.model).name}, {args.steps} steps on "
          f"{len(samples)} samples, block {args.block_size}; served T=0, {len(prompts)} code prompts x "
          f"{args.n_tokens} tokens, {args.parallel} parallel, {args.threads} thread(s), best of {args.repeats}\n")
    header = (f"{'config':<11} {'params M':>8} {'train s':>7} {'tau_prob':>8} {'tau_greedy':>10} {'served tau':>10} "
              f"{'draft ms':>8} {'tok/s':>7} {'speedup':>7}  same")
    print(header)
    print("-" * len(header))
    for r in rows:
        print(f"{r['config']:<11} {r['params_m']:8.2f} {r['train_s']:7.0f} {r['eval_tau_prob']:8.3f} "
              f"{r['eval_tau_greedy']:10.3f} {r['served_tau']:10.3f} {r['draft_ms_per_step']:8.2f} "
              f"{r['tokens_per_s']:7.1f} {r['speedup']:6.2f}x  {'yes' if r['identical_to_baseline'] else 'NO'}")
    result = {"model": args.model, "method": args.method, "steps": args.steps, "samples": len(samples),
              "block_size": args.block_size, "n_tokens": args.n_tokens, "parallel": args.parallel,
              "threads": args.threads, "machine": results_table.machine(),
              "baseline_tokens_per_s": base["tokens_per_s"], "rows": rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(f"\nwrote {args.out}")
    write_markdown(args, result)


def markdown_table(result: dict) -> str:
    fmt = results_table.fmt
    out = ["| config | params M | train s | tau_prob | tau_greedy | served tau | draft ms | tok/s | speedup | "
           "same output |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        same = {True: "yes", False: "NO"}.get(r.get("identical_to_baseline"), "-")
        out.append(f"| {r['config']} | {fmt(r.get('params_m'), 2)} | {fmt(r.get('train_s'), 0)} | "
                   f"{fmt(r.get('eval_tau_prob'), 3)} | {fmt(r.get('eval_tau_greedy'), 3)} | "
                   f"{fmt(r.get('served_tau'), 2)} | {fmt(r.get('draft_ms_per_step'), 2)} | "
                   f"{fmt(r.get('tokens_per_s'), 1)} | {fmt(r.get('speedup'), 2)} | {same} |")
    out += ["", "(tau_prob and tau_greedy: held-out estimates after training; served tau, draft time per "
            "verification step, tok/s and speedup: served at T=0; same output: identical to no speculation)"]
    return "\n".join(out)


def write_markdown(args, result: dict) -> None:
    conditions = (f"The {result['method']} recipe on {Path(result['model']).name}: {result['steps']} steps on "
                  f"{result['samples']} regenerated samples, block {result['block_size']}; served on the code "
                  f"prompts, {result['n_tokens']} tokens, {result['parallel']} parallel, "
                  f"{result['threads']} thread(s).")
    results_table.write_table(args, "Block-drafter backbones", markdown_table(result), conditions,
                              result.get("machine") or None)


if __name__ == "__main__":
    main()
