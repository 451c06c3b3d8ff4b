"""Configurations compared in one process, taking turns: the A/B to trust on a shared machine.

On a 2-core VM whose speed drifts by up to 2x within minutes, runs of two configurations in separate
processes, or one after the other, differ by more than what they are meant to show. This script
loads every configuration once (each its own engine on the bundled model), then runs the prompt set
through each in turn, prompt by prompt (or, with -np N, the whole set batched over N slots),
alternating the order, `--repeats` times; a configuration's time is its CPU time summed over one
repeat, and the table shows the fastest and the median repeat against the first configuration.

A configuration is SPEC[:QUANT[:N_MAX[:FLAGS[:OPTIONS]]]]: a spec type (`none` for no speculation; or
several, as ngram-mod,draft-dspark, with the draft-* one's settings), the drafter's --quant-draft
(default: as the shipped drafter is served), --spec-draft-n-max (default: as served; given, it is also
the length for sampled requests), and flags: `q` samples drafts
(--spec-draft-sample; DFlash: --spec-dflash-sample sample), `s` adds --spec-schedule, `t` serves the
target with --quant q8; and other engine options as NAME=VALUE pairs separated by commas
(spec_draft_p_min=0.5; draft_model=DIR serves another drafter folder with the shipped one's settings,
e.g. a retrained one against the shipped one). A configuration written REV@... runs under git revision
REV of the code (benchmarks/revisions.py): `HEAD~1@draft-dspark draft-dspark` measures what the last
commit did to DSpark. At T=0 it also says whether each configuration's tokens equal the first one's.

    .venv/bin/python benchmarks/interleaved.py none draft-mtp draft-mtp:int8 draft-dspark::6:s
        [-T 0] [--top-k 0 --top-p 1 --min-p 0] [-np 1] [-n 128] [--repeats 3] [--sets code,free-text]
        [--out runs/interleaved.json]
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from specserve import LLM, SamplingParams, kernels
from specserve.speculative.registry import model_drafter_type

from prompt_sets import CODE_PROMPTS, TEXT_PROMPTS
from revisions import load_revision

PROMPT_SETS = {"code": CODE_PROMPTS, "free-text": TEXT_PROMPTS}


def build(config: str, n_parallel: int) -> LLM:
    """The engine of a configuration ([REV@]SPEC[:QUANT[:N_MAX[:FLAGS[:OPTIONS]]]], module docstring)."""
    rev, _, config = config.rpartition("@")
    code = load_revision(rev)
    code.kernels.set_threads(1)
    spec, quant, n_max, flags, extra = (config.split(":") + ["", "", "", ""])[:5]
    target = {"quant": "q8"} if "t" in flags else {}
    if spec == "none":
        return code.LLM(code.BUNDLED_MODEL, n_parallel=n_parallel, **target)
    drafter_type = model_drafter_type(spec.split(",")) or spec        # (ngram-mod,draft-x: draft-x)
    drafter = code.shipped_drafters().get(drafter_type)
    options = code.served_options(drafter_type) if drafter else {}
    if quant:
        options["quant_draft"] = None if quant == "none" else quant
    if n_max:                                       # the one length, for greedy and sampled requests alike
        options["spec_draft_n_max"] = int(n_max)
        options.pop("spec_draft_n_max_sampled", None)
    if "q" in flags and drafter_type == "draft-dflash":        # drafts sampled, verified with their q
        options["spec_dflash_sample"] = "sample"
    elif "q" in flags:
        options["spec_draft_sample"] = True
    if "s" in flags:
        options["spec_schedule"] = True
    for item in filter(None, extra.split(",")):     # NAME=VALUE: any other engine option
        name, value = item.split("=", 1)
        options[name] = _value(value)
    draft_dir = options.pop("draft_model", drafter[0] if drafter else None)
    return code.LLM(code.BUNDLED_MODEL, draft_model=draft_dir, spec_type=spec, n_parallel=n_parallel,
                    **options, **target)


def _value(text: str):
    """An option value as typed: true / false, an int, a float, else the text."""
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("configs", nargs="+", help="SPEC[:QUANT[:N_MAX[:FLAGS[:OPTIONS]]]]; the first is the baseline")
    parser.add_argument("-T", "--temperature", type=float, default=0.0)
    parser.add_argument("--top-k", type=int, default=0, help="the requests' top-k (0: off)")
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--min-p", type=float, default=0.0)
    parser.add_argument("-np", "--parallel", type=int, default=1, help="slots; above 1 the set is batched")
    parser.add_argument("-n", "--n-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sets", default="code,free-text")
    parser.add_argument("--out", default="runs/interleaved.json")
    args = parser.parse_args()
    kernels.set_threads(1)
    engines = [build(c, args.parallel) for c in args.configs]
    texts = [p for name in args.sets.split(",") for p in PROMPT_SETS[name]]
    prompts = [engines[0].tokenizer.encode(t) for t in texts]
    for llm in engines:          # first-call costs (buffers, the first timed draft call) stay out
        llm.generate([p[:8] for p in prompts[:args.parallel]], [SamplingParams(temperature=0, max_tokens=8)] * args.parallel)
    units = [[i] for i in range(len(prompts))] if args.parallel == 1 else [list(range(len(prompts)))]
    cpu = [[0.0] * args.repeats for _ in engines]
    tokens, steps, accepted, outputs = [0] * len(engines), [0] * len(engines), [0] * len(engines), [[] for _ in engines]
    for rep in range(args.repeats):
        for u, unit in enumerate(units):
            order = range(len(engines)) if (u + rep) % 2 == 0 else reversed(range(len(engines)))
            for j in order:
                params = [SamplingParams(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
                                         min_p=args.min_p, max_tokens=args.n_tokens, ignore_eos=True, seed=i)
                          for i in unit]
                c0 = time.process_time()
                outs = engines[j].generate([prompts[i] for i in unit], params)
                cpu[j][rep] += time.process_time() - c0
                if rep == 0:
                    for o in outs:
                        tokens[j] += len(o.token_ids)
                        steps[j] += o.draft_stats.get("verify_steps", 0)
                        accepted[j] += o.draft_stats.get("accepted", 0)
                        outputs[j].append(o.token_ids)
    best0, median0 = min(cpu[0]), statistics.median(cpu[0])
    rows = []
    sampler = f"top-k {args.top_k}, top-p {args.top_p:g}, min-p {args.min_p:g}"
    print(f"T={args.temperature:g} ({sampler}), {args.parallel} slot(s), sets {args.sets}, {args.n_tokens} tokens, "
          f"{args.repeats} repeats; CPU seconds of one repeat; speedup over {args.configs[0]}")
    print(f"{'configuration':<28} {'best s':>8} {'median s':>9} {'tau':>6} {'best':>7} {'median':>7}  same tokens")
    for j, config in enumerate(args.configs):
        row = {"config": config, "cpu_s": cpu[j], "tokens": tokens[j],
               "tau": 1 + accepted[j] / steps[j] if steps[j] else 1.0,
               "speedup_best": best0 / min(cpu[j]), "speedup_median": median0 / statistics.median(cpu[j]),
               "same_tokens": outputs[j] == outputs[0] if args.temperature == 0 else None}
        rows.append(row)
        print(f"{config:<28} {min(cpu[j]):8.3f} {statistics.median(cpu[j]):9.3f} {row['tau']:6.2f} "
              f"{row['speedup_best']:6.2f}x {row['speedup_median']:6.2f}x  "
              f"{'-' if row['same_tokens'] is None else ('yes' if row['same_tokens'] else 'no')}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"args": vars(args), "threads": kernels.threads(), "results": rows}, indent=2))
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
