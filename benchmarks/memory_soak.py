"""Does the server's memory plateau under load? A bounded soak.

Starts `specserve serve` on the bundled model with 4 slots and sends `--rounds` rounds of 16
concurrent requests (half streamed, half not; half greedy, half sampled; prompts that differ per
round), then reads the server's resident memory (VmRSS) after each round. Prints the table and
the growth over the first and the second half of the rounds (a leak keeps growing; warm-up
allocations stop), and writes JSON.

    .venv/bin/python benchmarks/memory_soak.py [--rounds 20] [--spec-type ngram-mod] [--out FILE]
"""
from __future__ import annotations

import argparse
import asyncio
import json
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--spec-type", default="ngram-mod")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "memory_soak.json")
    args = parser.parse_args()
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
    half = args.rounds // 2
    first = rows[half]["rss_mb"] - rows[1]["rss_mb"]
    second = rows[-1]["rss_mb"] - rows[half]["rss_mb"]
    print(f"\ngrowth rounds 1-{half}: {first:+.1f} MB; rounds {half}-{args.rounds}: {second:+.1f} MB "
          f"({'plateau' if second <= max(2.0, 0.25 * abs(first)) else 'still growing'})")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"machine": platform.platform(), "concurrency": args.concurrency,
                                    "spec_type": args.spec_type, "rounds": rows}, indent=2))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
