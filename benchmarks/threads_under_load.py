"""Decode speed by thread count, on a quiet machine and beside busy neighbours.

For -t 1, -t 2 and -t 0 (the default: physical cores), the script decodes the same greedy
prompt on the bundled model with 0, 1 and 2 neighbour processes that each keep one core busy
(a spinning Python loop, as another program would), and prints tokens/s with the ratio to the
quiet -t 1 figure, so one run shows whether more threads ever hurt and how gracefully speed
degrades when cores are taken. Prints a table, writes JSON and the Markdown table the
documentation links (docs/results/threads_under_load.md; see benchmarks/results_table.py).

    .venv/bin/python benchmarks/threads_under_load.py [--threads 1,2,0] [--neighbours 0,1,2] [--out FILE]
        [--table-out FILE] [--from-json FILE] [--note TEXT]
"""
from __future__ import annotations

import argparse
import multiprocessing
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from specserve import LLM, SamplingParams  # noqa: E402
from specserve.commands.demo import DEMO_PROMPT  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import results_table  # noqa: E402


def spin(stop) -> None:
    while not stop.is_set():
        for _ in range(100_000):
            pass


def decode_speed(threads: int, n_tokens: int, repeats: int) -> float:
    llm = LLM(None, threads=threads)
    params = SamplingParams(temperature=0, max_tokens=n_tokens, ignore_eos=True)
    llm.generate(DEMO_PROMPT, params)
    speeds = []
    for _ in range(repeats):
        out = llm.generate(DEMO_PROMPT, params)[0]
        speeds.append(out.timings["predicted_per_second"])
    return sorted(speeds)[len(speeds) // 2]          # the median: neighbours make single runs jumpy


def measure(threads: int, neighbours: int, n_tokens: int, repeats: int) -> float:
    """Run in a fresh process so each thread count starts from a clean pool."""
    stop = multiprocessing.Event()
    hogs = [multiprocessing.Process(target=spin, args=(stop,), daemon=True) for _ in range(neighbours)]
    for hog in hogs:
        hog.start()
    try:
        time.sleep(0.5)
        with multiprocessing.get_context("spawn").Pool(1) as pool:
            return pool.apply(decode_speed, (threads, n_tokens, repeats))
    finally:
        stop.set()
        for hog in hogs:
            hog.join()


def markdown_table(record: dict) -> str:
    """A row per -t, a column per number of busy neighbours: tokens/s (ratio to quiet -t 1)."""
    rows = record["results"]
    base = next((r["tokens_per_s"] for r in rows if r["threads"] == 1 and r["neighbours"] == 0), None)
    threads = list(dict.fromkeys(r["threads"] for r in rows))
    neighbours = list(dict.fromkeys(r["neighbours"] for r in rows))
    speed = {(r["threads"], r["neighbours"]): r["tokens_per_s"] for r in rows}

    def label(n: int) -> str:
        return "no neighbour" if n == 0 else f"{n} busy neighbour{'s' if n > 1 else ''}"

    def name(t: int) -> str:
        return f"0 (default: {record.get('machine', {}).get('cpus', '?')} cores)" if t == 0 else str(t)

    out = ["| `-t` | " + " | ".join(label(n) for n in neighbours) + " |", "|---|" + "---|" * len(neighbours)]
    for t in threads:
        cells = []
        for n in neighbours:
            v = speed.get((t, n))
            cells.append("-" if v is None else f"{v:.0f}" + (f" ({v / base:.2f})" if base else ""))
        out.append(f"| {name(t)} | " + " | ".join(cells) + " |")
    repeats = record.get("repeats")
    out += ["", "(tokens/s, and in brackets the ratio to quiet `-t 1`"
            + (f"; each figure the median of {repeats} requests)" if repeats else ")")]
    return "\n".join(out)


def write_markdown(args, record: dict) -> None:
    machine = record.get("machine") or {}
    conditions = (f"Greedy decode of {record.get('n_predict', '?')} tokens on the bundled model beside "
                  f"processes that each keep one core busy; one run.")
    results_table.write_table(args, "Threads beside busy neighbours", markdown_table(record), conditions,
                              f"{machine.get('platform', '?')}, {machine.get('cpus', '?')} CPUs")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", default="1,2,0")
    parser.add_argument("--neighbours", default="0,1,2")
    parser.add_argument("--n-predict", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "threads_under_load.json")
    results_table.add_options(parser, "threads_under_load")
    args = parser.parse_args()
    earlier = results_table.load_runs(args)
    if earlier is not None:
        write_markdown(args, earlier[-1])
        return 0
    rows = []
    for neighbours in (int(n) for n in args.neighbours.split(",")):
        for threads in (int(t) for t in args.threads.split(",")):
            speed = measure(threads, neighbours, args.n_predict, args.repeats)
            rows.append({"threads": threads, "neighbours": neighbours, "tokens_per_s": speed})
            print(f"-t {threads}  busy neighbours {neighbours}: {speed:8.1f} tokens/s", flush=True)
    record = {"machine": {"platform": platform.platform(), "cpus": os.cpu_count()},
              "n_predict": args.n_predict, "repeats": args.repeats, "results": rows}
    print(f"\n(one run; each figure the median of {args.repeats} requests)\n")
    print(markdown_table(record))
    results_table.write_json(args.out, record)
    write_markdown(args, record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
