"""Decode speed by thread count, on a quiet machine and beside busy neighbours.

For -t 1, -t 2 and -t 0 (the default: physical cores), the script decodes the same greedy
prompt on the bundled model with 0, 1 and 2 neighbour processes that each keep one core busy
(a spinning Python loop, as another program would), and prints tokens/s with the ratio to the
quiet -t 1 figure, so one run shows whether more threads ever hurt and how gracefully speed
degrades when cores are taken. Prints a table and writes JSON.

    .venv/bin/python benchmarks/threads_under_load.py [--threads 1,2,0] [--neighbours 0,1,2] [--out FILE]
"""
from __future__ import annotations

import argparse
import json
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", default="1,2,0")
    parser.add_argument("--neighbours", default="0,1,2")
    parser.add_argument("--n-predict", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "threads_under_load.json")
    args = parser.parse_args()
    rows = []
    for neighbours in (int(n) for n in args.neighbours.split(",")):
        for threads in (int(t) for t in args.threads.split(",")):
            speed = measure(threads, neighbours, args.n_predict, args.repeats)
            rows.append({"threads": threads, "neighbours": neighbours, "tokens_per_s": speed})
            print(f"-t {threads}  busy neighbours {neighbours}: {speed:8.1f} tokens/s", flush=True)
    base = next((r["tokens_per_s"] for r in rows if r["threads"] == 1 and r["neighbours"] == 0), None)
    print(f"\n(one run; each figure the median of {args.repeats} requests)")
    print("\n| threads | busy neighbours | tokens/s | vs quiet -t 1 |\n|---|---|---|---|")
    for r in rows:
        ratio = f"{r['tokens_per_s'] / base:.2f}" if base else "-"
        print(f"| {r['threads']} | {r['neighbours']} | {r['tokens_per_s']:.1f} | {ratio} |")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"machine": {"platform": platform.platform(), "cpus": os.cpu_count()},
                                    "n_predict": args.n_predict, "results": rows}, indent=2))
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
