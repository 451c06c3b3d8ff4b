"""Block drafters benchmark: DFlash vs DSpark vs no speculation on the bundled model.

One run, side by side for every cell (prompt set x temperature x parallel requests):
  * mean acceptance length tau (1 + accepted drafts per verification step),
  * acceptance rate per draft position,
  * decode throughput and speedup over no speculation in the same cell,
  * at T=0: whether the output is identical to no speculation.
Configurations run interleaved and each cell is repeated; the best throughput of the repeats
is kept to damp noise from other processes. Prints a table and writes JSON.

    .venv/bin/python benchmarks/block_drafters.py [--n-tokens 128] [--out runs/block_drafters.json]
"""
from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path


from specserve import LLM, SamplingParams
from specserve import kernels
from specserve.llm import BUNDLED_DIR, BUNDLED_MODEL

from prompt_sets import CODE_PROMPTS, TEXT_PROMPTS

CONFIGS = {
    "none": {},
    "dflash": {"spec_type": "draft-dflash"},
    "dspark": {"spec_type": "draft-dspark"},
    "dspark-schedule": {"spec_type": "draft-dspark", "spec_dspark_schedule": True},
}


def run_cell(llm, prompts, temperature, n_tokens):
    params = [SamplingParams(temperature=temperature, top_k=0, top_p=1.0, min_p=0.0, seed=1000 + i,
                             max_tokens=n_tokens, ignore_eos=True) for i in range(len(prompts))]
    driver = llm.engine.driver
    prev = next(iter(driver.stats_dict().values())) if driver else None     # counters are cumulative
    t0 = time.perf_counter()
    outs = llm.generate(prompts, params)
    wall = time.perf_counter() - t0
    result = {"tokens_per_s": sum(len(o.token_ids) for o in outs) / wall, "wall_s": wall,
              "tokens": [o.token_ids for o in outs]}
    if driver:
        after = next(iter(driver.stats_dict().values()))
        steps = after["n_call_accept"] - prev["n_call_accept"]
        accepted = after["n_acc_tokens"] - prev["n_acc_tokens"]
        drafted = after["n_gen_tokens"] - prev["n_gen_tokens"]
        per_pos = [a - (prev["n_acc_per_pos"][k] if k < len(prev["n_acc_per_pos"]) else 0)
                   for k, a in enumerate(after["n_acc_per_pos"])]
        result.update(tau=1 + accepted / max(steps, 1), acceptance=accepted / max(drafted, 1),
                      per_position=[c / max(steps, 1) for c in per_pos], verify_steps=steps,
                      draft_ms_per_step=(after["t_draft_us"] - prev["t_draft_us"]) / 1000 / max(steps, 1))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-m", "--model", default=str(BUNDLED_MODEL))
    parser.add_argument("--dflash", default=str(BUNDLED_DIR / "stdlib-coder-dflash"))
    parser.add_argument("--dspark", default=str(BUNDLED_DIR / "stdlib-coder-dspark"))
    parser.add_argument("--configs", default="none,dflash,dspark", help=f"comma list of {', '.join(CONFIGS)}")
    parser.add_argument("-n", "--n-tokens", type=int, default=128)
    parser.add_argument("--n-max", type=int, default=8, help="--spec-draft-n-max (clamped to the trained block)")
    parser.add_argument("--temperatures", default="0,1")
    parser.add_argument("--parallel", default="1,4")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("-t", "--threads", type=int, default=1,
                        help="compute threads (default 1: ratios measured on one thread move least on a shared "
                             "machine; 0 = the physical cores)")
    parser.add_argument("--out", default="runs/block_drafters.json")
    args = parser.parse_args()
    if args.threads:
        kernels.set_threads(args.threads)
    configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    temps = [float(t) for t in args.temperatures.split(",")]
    parallels = [int(p) for p in args.parallel.split(",")]
    drafts = {"draft-dflash": args.dflash, "draft-dspark": args.dspark}

    llms = {}
    for par in parallels:
        for name in configs:
            opts = dict(CONFIGS[name])
            spec_type = opts.pop("spec_type", "none")
            llm = LLM(args.model, draft_model=drafts.get(spec_type), spec_type=spec_type, n_parallel=par,
                      spec_draft_n_max=args.n_max, **opts)
            llm.generate(CODE_PROMPTS[0], SamplingParams(temperature=0, max_tokens=8))     # warm-up
            llms[name, par] = llm
    tokenizer = llms[configs[0], parallels[0]].tokenizer
    sets = {"code": [tokenizer.encode(p) for p in CODE_PROMPTS], "text": [tokenizer.encode(p) for p in TEXT_PROMPTS]}

    cells = []
    for set_name, prompts in sets.items():
        for temp in temps:
            for par in parallels:
                best = {}
                for _ in range(args.repeats):
                    for name in configs:
                        r = run_cell(llms[name, par], prompts, temp, args.n_tokens)
                        if name not in best or r["tokens_per_s"] > best[name]["tokens_per_s"]:
                            best[name] = r
                base = best.get("none")
                for name in configs:
                    r = best[name]
                    cell = {"prompts": set_name, "temperature": temp, "parallel": par, "config": name,
                            **{k: v for k, v in r.items() if k != "tokens"}}
                    if base:
                        cell["speedup"] = r["tokens_per_s"] / base["tokens_per_s"]
                        if temp == 0:
                            cell["identical_to_baseline"] = r["tokens"] == base["tokens"]
                    cells.append(cell)

    print(f"\nblock drafters benchmark: {Path(args.model).name}, {args.n_tokens} tokens x {len(CODE_PROMPTS)} prompts "
          f"per cell, --spec-draft-n-max {args.n_max}, {kernels.threads()} threads, best of {args.repeats}\n")
    header = f"{'prompts':<6} {'T':>3} {'par':>3}  {'config':<16} {'tok/s':>7} {'speedup':>7} {'tau':>5}  " \
             f"{'draft ms':>8}  same  acceptance per position"
    print(header)
    print("-" * len(header) + "-" * 20)
    for c in cells:
        same = {True: "yes", False: "NO"}.get(c.get("identical_to_baseline"), "")
        pos = ", ".join(f"{p:.2f}" for p in c.get("per_position", []))
        tau = f"{c['tau']:5.2f}" if "tau" in c else "    -"
        draft_ms = f"{c['draft_ms_per_step']:8.2f}" if "draft_ms_per_step" in c else "       -"
        print(f"{c['prompts']:<6} {c['temperature']:>3g} {c['parallel']:>3}  {c['config']:<16} "
              f"{c['tokens_per_s']:7.1f} {c.get('speedup', 1.0):6.2f}x {tau}  {draft_ms}  {same:<4}  {pos}")

    summary = {}
    if "dflash" in configs and "dspark" in configs:
        ratios = []
        for c in cells:
            if c["config"] == "dspark":
                other = next(x for x in cells if x["config"] == "dflash" and all(
                    x[k] == c[k] for k in ("prompts", "temperature", "parallel")))
                ratios.append(c["tau"] / other["tau"])
        summary["dspark_over_dflash_tau"] = sum(ratios) / len(ratios)
        print(f"\nDSpark tau / DFlash tau, mean over cells: {summary['dspark_over_dflash_tau']:.3f}")
    for c in cells:
        if c["config"] == "dspark" and c["temperature"] == 0 and c["prompts"] == "code" and "speedup" in c:
            summary[f"dspark_speedup_T0_code_par{c['parallel']}"] = c["speedup"]
            print(f"DSpark speedup over no speculation, T=0, code, {c['parallel']} request(s): {c['speedup']:.2f}x")
    result = {"model": args.model, "dflash": args.dflash, "dspark": args.dspark, "n_tokens": args.n_tokens,
              "n_max": args.n_max, "threads": kernels.threads(), "machine": platform.processor(),
              "cells": cells, "summary": summary}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
