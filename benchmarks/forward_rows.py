"""The bundled target's forward time by row count, for one or more code revisions taking turns in one process.

What a verified draft row costs is the ratio of these times (a spec step verifies 1 + n rows, plain
decoding one), and a kernel change shows here first. Each revision (benchmarks/revisions.py: `HEAD~1`,
a commit, or `.` for the working tree) loads the bundled model on the native kernels; then, in rounds
that alternate the order, each times `--calls` forwards of each row count after a `--context`-token
context (one slot, the cache rolled back after each call). The table shows the median and the fastest
tenth per revision, and each revision's median against the first one's. On a shared or drifting
machine only such alternating runs compare builds.

    .venv/bin/python benchmarks/forward_rows.py HEAD~1 . [--rows 1,2,4,8] [--rounds 20] [--calls 30]
        [--threads 1] [--quant q8] [--out runs/forward_rows.json]
"""
from __future__ import annotations

import argparse
import importlib
import json
import time
from pathlib import Path

import numpy as np
import torch

from revisions import load_revision


def load(rev: str, threads: int, quant: str | None, context: int, longest: int):
    """(target model, its cache, its StepBatch class) under revision `rev` ('.': the working tree)."""
    code = load_revision("" if rev == "." else rev)
    code.kernels.set_threads(threads)
    package = code.LLM.__module__.split(".")[0]
    llm = code.LLM(code.BUNDLED_MODEL, **({"quant": quant} if quant else {}))
    step_batch = importlib.import_module(package + ".models.step_batch").StepBatch
    return llm.target, llm.target.new_cache(1, context + longest + 1), step_batch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("revisions", nargs="+", help="git revisions, '.' for the working tree; the first is the baseline")
    parser.add_argument("--rows", default="1,2,4,8")
    parser.add_argument("--context", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--calls", type=int, default=30, help="forwards per row count, revision and round")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--quant", default=None, help="the target's --quant (int8, q8); default bfloat16")
    parser.add_argument("--out", default="runs/forward_rows.json")
    args = parser.parse_args()
    rows = [int(r) for r in args.rows.split(",")]
    builds = [load(rev, args.threads, args.quant, args.context, max(rows)) for rev in args.revisions]
    times = [{r: [] for r in rows} for _ in builds]
    with torch.inference_mode():
        for rnd in range(args.rounds):
            for i in (range(len(builds)) if rnd % 2 == 0 else reversed(range(len(builds)))):
                target, cache, step_batch = builds[i]
                for r in rows:
                    segment = [(0, torch.ones(r, dtype=torch.int64), args.context)]
                    for _ in range(args.calls):
                        cache.lengths[0] = args.context
                        batch = step_batch.build(segment, list(range(r)))
                        t0 = time.perf_counter()
                        target.forward_step(batch, cache)
                        times[i][r].append(time.perf_counter() - t0)
    print(f"bundled target, {args.threads} thread(s), {args.quant or 'bfloat16'}, {args.context}-token context; "
          f"ms per forward: median / fastest tenth ({args.rounds * args.calls} calls each), "
          f"and the first revision's median over this one's")
    print(f"{'rows':>4}  " + "  ".join(f"{rev:>22}" for rev in args.revisions))
    results = []
    for r in rows:
        medians = [float(np.median(t[r])) for t in times]
        tenths = [float(np.percentile(t[r], 10)) for t in times]
        cells = [f"{m * 1e3:7.3f} / {p * 1e3:6.3f}" + (f" {medians[0] / m:4.2f}x" if i else "      ")
                 for i, (m, p) in enumerate(zip(medians, tenths))]
        print(f"{r:4d}  " + "  ".join(f"{c:>22}" for c in cells))
        results.append({"rows": r, "median_s": medians, "tenth_s": tenths})
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"args": vars(args), "results": results}, indent=2))
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
