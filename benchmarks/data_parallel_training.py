"""Data-parallel drafter training: steps per second of `specserve train-draft` in one process and
under torchrun with several ranks, side by side in one run, on the same global batch.

Each configuration trains the same drafter for the bundled model for --steps steps with every
process on --threads-per-rank threads except the single process, which gets all the ranks' threads
(so both use the same cores); the figure is steps / training seconds from the run's log (model
loading and the final evaluation are not counted). Prints a table, writes JSON and
docs/results/data_parallel_training.md.

    .venv/bin/python benchmarks/data_parallel_training.py --data runs/d16/regen12k.npz [--ranks 2]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import results_table

ROOT = Path(__file__).resolve().parent.parent
# a block drafter (its own loop, checkpoints) and a chain drafter (the shared loop)
METHODS = {
    "draft-dspark": ["--batch-size", "4", "--layers", "2", "--block-size", "8", "--checkpoint-every", "100000",
                     "--eval-samples", "8", "--no-progress"],
    "draft-simple": ["--batch-size", "8", "--eval-samples", "2", "--draft-layers", "2"],
}


def run(method: str, ranks: int, threads: int, data: str, steps: int, scratch: Path) -> float:
    """Training steps per second of one configuration."""
    out = scratch / f"{method}-{ranks}"
    args = ["train-draft", "--method", method, "--data", data, "--out", str(out), "--steps", str(steps),
            "-t", str(threads), *METHODS[method]]
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS=str(threads))
    if ranks == 1:
        cmd = [sys.executable, "-m", "specserve", *args]
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(ranks),
               "--master-addr", "127.0.0.1", "--master-port", "29533", "-m", "specserve", *args]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{done.stderr[-2000:]}")
    return steps / training_seconds(method, out)


def training_seconds(method: str, out: Path) -> float:
    if method in ("draft-dflash", "draft-dspark"):
        records = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
        return max(r["elapsed_s"] for r in records if "elapsed_s" in r)
    return json.loads((out / "training_summary.json").read_text())["minutes"] * 60


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", required=True, help="a regen_data file for the bundled model")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--threads-per-rank", type=int, default=1)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    parser.add_argument("--out", default="runs/data_parallel_training.json")
    results_table.add_options(parser, "data_parallel_training")
    args = parser.parse_args()
    earlier = results_table.load_runs(args)
    if earlier:
        record = earlier[-1]
    else:
        rows = []
        with tempfile.TemporaryDirectory() as scratch:
            for method in args.methods:
                single = run(method, 1, args.ranks * args.threads_per_rank, args.data, args.steps, Path(scratch))
                parallel = run(method, args.ranks, args.threads_per_rank, args.data, args.steps, Path(scratch))
                rows.append({"method": method, "single_steps_per_s": single, "parallel_steps_per_s": parallel,
                             "ratio": parallel / single})
        record = {"ranks": args.ranks, "threads_per_rank": args.threads_per_rank, "steps": args.steps,
                  "rows": rows, "machine": results_table.machine()}
        results_table.write_json(Path(args.out), record)
    body = table(record)
    print(body)
    results_table.write_table(args, "Data-parallel drafter training: one process vs torchrun ranks", body,
                              f"{record['steps']} steps each, one run.", record.get("machine"))
    return 0


def table(record: dict) -> str:
    ranks, threads = record["ranks"], record["threads_per_rank"]
    lines = [f"| drafter | 1 process x {ranks * threads} threads (steps/s) | {ranks} ranks x {threads} thread(s) "
             "(steps/s) | ratio |", "|---|---|---|---|"]
    for r in record["rows"]:
        lines.append(f"| {r['method']} | {r['single_steps_per_s']:.2f} | {r['parallel_steps_per_s']:.2f} | "
                     f"{r['ratio']:.2f}x |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
