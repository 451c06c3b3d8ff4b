"""Does the server's memory plateau under load? A bounded soak.

Starts `specserve serve` on the bundled model with 4 slots and sends `--rounds` rounds of 16
concurrent requests (half streamed, half not; half greedy, half sampled; prompts that differ per
round), then reads the server's resident memory (VmRSS) after each round. Prints the table and
the growth over the first and the second half of the rounds (a leak keeps growing; warm-up
allocations stop), writes JSON and the Markdown table the documentation links
(docs/results/memory_soak.md; see benchmarks/results_table.py). SPECSERVE_KERNELS=torch in the
environment soaks the PyTorch path instead of the native kernels.

    .venv/bin/python benchmarks/memory_soak.py [--rounds 20] [--spec-type ngram-mod] [--out FILE]
        [--table-out FILE] [--from-json FILE] [--note TEXT]
"""
from __future__ import annotations

import argparse
import asyncio
import os
import platform
import sys
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from specserve.llm import BUNDLED_MODEL  # noqa: E402

from prompt_sets import CODE_PROMPTS, TEXT_PROMPTS  # noqa: E402
from serve_process import ServeProcess  # noqa: E402
import results_table  # noqa: E402


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


async def one(client: httpx.AsyncClient, url: str, prompt: str, i: int) -> None:
    body = {"prompt": prompt, "max_tokens": 96, "temperature": 0 if i % 2 else 0.8, "seed": i,
            "stream": i % 4 < 2}
    if body["stream"]:
        async with client.stream("POST", url + "/v1/completions", json=body) as r:
            async for _ in r.aiter_lines():
                pass
    else:
        (await client.post(url + "/v1/completions", json=body)).raise_for_status()


async def round_of(url: str, n: int, round_index: int) -> None:
    prompts = CODE_PROMPTS + TEXT_PROMPTS
    async with httpx.AsyncClient(timeout=300) as client:
        await asyncio.gather(*(one(client, url, f"# request {round_index}.{i}\n" + prompts[i % len(prompts)], i)
                               for i in range(n)))


def growth(rows: list[dict]) -> tuple[int, float, float]:
    """(half, MB grown over rounds 1..half, MB grown over rounds half..last)."""
    half = (len(rows) - 1) // 2
    return half, rows[half]["rss_mb"] - rows[1]["rss_mb"], rows[-1]["rss_mb"] - rows[half]["rss_mb"]


def markdown_table(records: list[dict]) -> str:
    """A row per run (by kernels): resident memory after start-up, after the first, middle and last
    round, and the growth over each half of the rounds."""
    rows = records[0]["rounds"]
    half, last = growth(rows)[0], rows[-1]["round"]
    marks = (0, 1, half, last)
    out = ["| kernels | " + " | ".join("after start-up" if m == 0 else f"round {m}" for m in marks)
           + f" | growth rounds 1-{half} | growth rounds {half}-{last} |",
           "|---|" + "---|" * (len(marks) + 2)]
    for record in records:
        rss = {r["round"]: r["rss_mb"] for r in record["rounds"]}
        _, first, second = growth(record["rounds"])
        out.append(f"| {record.get('kernels', 'auto')} | "
                   + " | ".join(f"{rss[m]:.0f} MB" if m in rss else "-" for m in marks)
                   + f" | {first:+.0f} MB | {second:+.0f} MB |")
    return "\n".join(out)


def write_markdown(args, records: list[dict]) -> None:
    first = records[0]
    conditions = (f"Resident memory of `specserve serve -np 4 --spec-type {first['spec_type']}` on the bundled "
                  f"model over {len(first['rounds']) - 1} rounds of {first['concurrency']} concurrent requests; "
                  f"one run per row.")
    results_table.write_table(args, "Server memory under load", markdown_table(records), conditions,
                              first.get("machine"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--spec-type", default="ngram-mod")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "memory_soak.json")
    results_table.add_options(parser, "memory_soak")
    args = parser.parse_args()
    earlier = results_table.load_runs(args)
    if earlier is not None:
        write_markdown(args, earlier)
        return 0
    log = ROOT / "runs" / "memory_soak.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    server = ServeProcess(BUNDLED_MODEL, ["-np", "4", "--spec-type", args.spec_type], log)
    error = server.wait()
    if error:
        print(f"server did not start: {error}")
        return 1
    try:
        rows = [{"round": 0, "rss_mb": rss_mb(server.proc.pid)}]
        print(f"after start-up: {rows[0]['rss_mb']:.1f} MB", flush=True)
        for r in range(1, args.rounds + 1):
            asyncio.run(round_of(server.url, args.concurrency, r))
            rows.append({"round": r, "rss_mb": rss_mb(server.proc.pid)})
            print(f"round {r:2d}: {rows[-1]['rss_mb']:.1f} MB", flush=True)
    finally:
        server.stop()
    half, first, second = growth(rows)
    print(f"\ngrowth rounds 1-{half}: {first:+.1f} MB; rounds {half}-{args.rounds}: {second:+.1f} MB "
          f"({'plateau' if second <= max(2.0, 0.25 * abs(first)) else 'still growing'})")
    record = {"machine": platform.platform(), "concurrency": args.concurrency, "spec_type": args.spec_type,
              "kernels": os.environ.get("SPECSERVE_KERNELS", "auto"), "rounds": rows}
    results_table.write_json(args.out, record)
    write_markdown(args, [record])
    return 0


if __name__ == "__main__":
    sys.exit(main())
