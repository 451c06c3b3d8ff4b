"""Server benchmark: throughput and latency vs concurrency, speculation off vs every spec type.

For each configuration (no speculation, then each --spec-type in the registry) the script
starts `specserve serve` itself, sends streaming greedy /v1/completions requests at
concurrency 1, 2, 4, 8 and 16 (as many slots as the highest concurrency), and measures
output tokens/s over the whole level, mean end-to-end latency, mean time to first token
and the mean acceptance length reported by the server. Every request of a level has its own
prompt, and every level starts fresh servers, so methods that learn across requests gain
nothing from repeats. The servers of one level are up together (an idle one sleeps) and
take turns, so changes in the machine's load hit every configuration alike. Greedy outputs
must be identical in every configuration (lossless); the table says so. With `--temperature T` the
requests are sampled at T (each with its own seed; the server fills in the rest of its default
sampler, llama.cpp's top-k 40, top-p 0.95 and min-p 0.05), and outputs are not compared. Prints a table, writes
JSON and the Markdown table the documentation links (docs/results/server_throughput.md; see
benchmarks/results_table.py).

    .venv/bin/python benchmarks/server_throughput.py [-m MODEL] [--out runs/server_throughput.json]
        [--spec-types ngram-simple,ngram-mod+schedule,ngram-mod+draft-dspark,...] [--draft-model DIR] [--max-tokens 128]
        [--temperature 0] [--table-out FILE] [--from-json FILE] [--note TEXT] [-- extra server options]

The draft-* types use the bundled drafters with the bundled model, served as shipped for this CPU
(specserve.bundled.served_options: draft lengths, weights, draft vocabulary), or --draft-model; a
type that cannot start is skipped with the server's error.
"""
from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import platform
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from specserve.bundled import served_options, shipped_drafters  # noqa: E402
from specserve.llm import BUNDLED_MODEL  # noqa: E402
from specserve.options import command_line  # noqa: E402
from specserve.speculative.registry import available_types, model_drafter_type  # noqa: E402

from serve_process import ServeProcess  # noqa: E402
from server_prompts import prompts  # noqa: E402
import results_table  # noqa: E402

def server_args(spec_label: str, model: str, slots: int, extra: list[str], draft_model: str | None) -> list[str]:
    """`specserve serve` options for one configuration ("TYPE+schedule": TYPE with --spec-schedule; "A+B": the
    types together, the n-gram ones for greedy requests only)."""
    parts = spec_label.split("+")
    types = [t for t in parts if t != "schedule"]
    args = ["-np", str(slots), "--spec-type", ",".join(types), "--temp", "0", *extra]
    if "schedule" in parts:
        args.append("--spec-schedule")
    if len(types) > 1:
        args.append("--spec-ngram-greedy-only")
    drafter_type = model_drafter_type(types)
    if drafter_type:
        shipped = shipped_drafters().get(drafter_type) if Path(model) == BUNDLED_MODEL else None
        if draft_model:
            args += ["-md", draft_model]
        elif shipped:           # the bundled model's own drafter, served as shipped for this CPU
            args += ["-md", str(shipped[0]), *command_line(served_options(drafter_type))]
    return args


async def one_request(client: httpx.AsyncClient, prompt: str, max_tokens: int, temperature: float, seed: int) -> dict:
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": temperature, "seed": seed, "stream": True,
            "stream_options": {"include_usage": True}}
    t0 = time.perf_counter()
    ttft, text, final = None, [], {}
    async with client.stream("POST", "/v1/completions", json=body) as resp:
        if resp.status_code != 200:
            raise RuntimeError(f"HTTP {resp.status_code}: {(await resp.aread()).decode()[:300]}")
        async for line in resp.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[6:])
            if "error" in event:
                raise RuntimeError(event["error"]["message"])
            if event["choices"] and event["choices"][0]["text"]:
                ttft = ttft if ttft is not None else time.perf_counter() - t0
                text.append(event["choices"][0]["text"])
            if event.get("usage"):
                final = event
    spec = (final.get("metrics") or {}).get("speculative_decoding") or {}
    return {"latency_s": time.perf_counter() - t0, "ttft_s": ttft or 0.0, "text": "".join(text),
            "completion_tokens": final["usage"]["completion_tokens"],
            "spec_steps": spec.get("num_spec_steps", 0), "accepted": spec.get("num_accepted_draft_tokens", 0)}


async def run_level(url: str, prompt_list: list[str], concurrency: int, n_requests: int, max_tokens: int,
                    temperature: float = 0.0) -> dict:
    limit = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(base_url=url, timeout=600,
                                 limits=httpx.Limits(max_connections=concurrency + 4)) as client:
        async def guarded(i):
            async with limit:
                return i, await one_request(client, prompt_list[i % len(prompt_list)], max_tokens, temperature, i)

        t0 = time.perf_counter()
        results = await asyncio.gather(*(guarded(i) for i in range(n_requests)))
        wall = time.perf_counter() - t0
    results = [r for _, r in sorted(results, key=lambda x: x[0])]
    tokens = sum(r["completion_tokens"] for r in results)
    steps = sum(r["spec_steps"] for r in results)
    return {
        "concurrency": concurrency, "requests": n_requests, "wall_s": wall, "output_tokens": tokens,
        "tokens_per_s": tokens / wall, "mean_latency_s": sum(r["latency_s"] for r in results) / len(results),
        "mean_ttft_ms": 1000 * sum(r["ttft_s"] for r in results) / len(results),
        "mean_acceptance_length": 1 + sum(r["accepted"] for r in results) / steps if steps else None,
        # sampled outputs differ between configurations (their draws use the uniforms differently)
        "output_digests": None if temperature > 0 else
        [hashlib.sha1(r["text"].encode()).hexdigest()[:12] for r in results[:len(prompt_list)]],
    }


def markdown_table(report: dict) -> str:
    """A row per configuration: output tokens/s over no speculation at each concurrency, and the mean
    acceptance length at the highest one."""
    base = {r["concurrency"]: r for r in report["configs"].get("none", {}).get("levels", [])}
    levels = report["levels"]
    top = max(levels)
    speeds = ", ".join(f"{base[c]['tokens_per_s']:.0f}" for c in levels if c in base)
    out = [f"No speculation streamed {speeds} tok/s at c={', '.join(map(str, levels))}.", "",
           "| config | " + " | ".join(f"c={c}" for c in levels) + f" | mean AL (c={top}) |",
           "|---|" + "---|" * (len(levels) + 1)]
    different = []
    for spec_type, result in report["configs"].items():
        if spec_type == "none":
            continue
        if "skipped" in result:
            out.append(f"| {spec_type} | " + " | ".join(["skipped"] + ["-"] * len(levels)) + " |")
            continue
        rows = {r["concurrency"]: r for r in result["levels"]}
        cells = []
        for c in levels:
            r, ref = rows.get(c), base.get(c)
            cells.append(f"{r['tokens_per_s'] / ref['tokens_per_s']:.2f}x" if r and ref else "-")
            if r and ref and r["output_digests"] != ref["output_digests"]:       # (None when sampled)
                different.append(f"{spec_type} at c={c}")
        al = rows.get(top, {}).get("mean_acceptance_length")
        out.append(f"| {spec_type} | " + " | ".join(cells) + f" | {results_table.fmt(al)} |")
    sampled = report.get("temperature", 0) > 0
    out += ["", "(speedup in output tokens/s over no speculation at the same concurrency; "
            + ("sampled outputs, not compared)" if sampled else "every output identical to no speculation)"
               if not different else
               f"outputs DIFFERENT from no speculation: {', '.join(different)})")]
    return "\n".join(out)


def _requests(report: dict) -> str:
    t = report.get("temperature", 0)
    return "greedy" if t <= 0 else f"sampled (T={t:g}, the server's default top-k, top-p and min-p)"


def write_markdown(args, report: dict) -> None:
    machine = report.get("machine") or {}
    extra = " ".join(report.get("server_args") or [])
    conditions = (f"`specserve serve` on {Path(report['model']).name}, `-t {report['threads']}`"
                  + (f" {extra}" if extra else "") + f", {_requests(report)} streaming completions of at most "
                  f"{report['max_tokens']} tokens, fresh servers at every concurrency level.")
    results_table.write_table(args, "Server throughput by concurrency", markdown_table(report), conditions,
                              f"{machine.get('platform', '?')}, {machine.get('cpu_count', '?')} CPUs")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-m", "--model", default=str(BUNDLED_MODEL))
    parser.add_argument("--concurrency", default="1,2,4,8,16")
    parser.add_argument("--spec-types", default=None,
                        help="comma list (default: every type in the registry); TYPE+schedule runs TYPE "
                             "with --spec-schedule, A+B the types together (ngram-mod+draft-dspark: "
                             "--spec-type ngram-mod,draft-dspark --spec-ngram-greedy-only)")
    parser.add_argument("--draft-model", default=None, help="draft model folder for the draft-* types")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--temperature", type=float, default=0.0,
                        help="sample the requests at this temperature (0: greedy, outputs compared)")
    parser.add_argument("--threads", type=int, default=1,
                        help="server CPU threads (-t); one is steadiest on a shared machine")
    parser.add_argument("--min-requests", type=int, default=16,
                        help="requests per level: max(this, 2 x concurrency), at most one per distinct prompt")
    parser.add_argument("--rounds", type=int, default=1, help="measurements per level and configuration; best kept")
    parser.add_argument("--out", default=str(ROOT / "runs" / "server_throughput.json"))
    parser.add_argument("server_args", nargs="*", help="extra `specserve serve` options (after --)")
    results_table.add_options(parser, "server_throughput")
    args = parser.parse_args()
    earlier = results_table.load_runs(args)
    if earlier is not None:
        write_markdown(args, earlier[-1])
        return

    levels = [int(c) for c in args.concurrency.split(",")]
    types = ["none"] + ([t for t in args.spec_types.split(",") if t] if args.spec_types
                        else [t for t in available_types() if t != "none"])
    prompt_list = prompts()
    out_path = Path(args.out)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    report = {"model": args.model, "max_tokens": args.max_tokens, "levels": levels, "prompts": len(prompt_list),
              "machine": {"cpu_count": os.cpu_count(), "platform": platform.platform()},
              "threads": args.threads, "server_args": args.server_args, "temperature": args.temperature,
              "configs": {}}
    for spec_type in types:
        report["configs"][spec_type] = {"levels": []}
    for c in levels:
        n_requests = min(len(prompt_list), max(args.min_requests, 2 * c))
        best: dict[str, dict] = {}
        for _ in range(args.rounds):
            # fresh servers for every measurement: nothing learnt from earlier requests carries over
            servers = start_servers(args, types, max(levels), out_path, report)
            try:
                for spec_type, server in servers.items():      # configurations take turns
                    row = asyncio.run(run_level(server.url, prompt_list, c, n_requests, args.max_tokens,
                                                args.temperature))
                    if spec_type not in best or row["tokens_per_s"] > best[spec_type]["tokens_per_s"]:
                        best[spec_type] = row
            finally:
                for server in servers.values():
                    server.stop()
        for spec_type, row in best.items():
            report["configs"][spec_type]["levels"].append(row)
            print(f"{spec_type:>22} c={c:<3d} {row['tokens_per_s']:8.1f} tok/s  "
                  f"latency {row['mean_latency_s']:6.2f} s", flush=True)
    print_table(report)
    out_path.write_text(json.dumps(report, indent=2))
    print(f"\nwrote {out_path}")
    write_markdown(args, report)


def start_servers(args, types: list[str], slots: int, out_path: Path, report: dict) -> dict[str, ServeProcess]:
    """One warmed-up server per configuration; a type that cannot start is marked skipped."""
    pending = {t: ServeProcess(args.model, server_args(t, args.model, slots, ["-t", str(args.threads),
                                                                          *args.server_args], args.draft_model),
                               out_path.with_name(f"server_throughput.{t}.log"))
               for t in types if "skipped" not in report["configs"][t]}
    servers = {}
    for spec_type, server in pending.items():
        reason = server.wait()
        if reason is not None:
            server.stop()
            print(f"{spec_type}: skipped ({reason})", flush=True)
            report["configs"][spec_type] = {"skipped": reason}
            continue
        servers[spec_type] = server
    return servers


def print_table(report: dict) -> None:
    base = {r["concurrency"]: r for r in report["configs"].get("none", {}).get("levels", [])}
    print(f"\nmodel: {report['model']}, {report['max_tokens']} max tokens per request, {_requests(report)}, streaming, "
          f"{report['threads']} server thread(s)")
    print(f"{'spec type':>22} {'conc':>5} {'tok/s':>9} {'speedup':>8} {'latency s':>10} {'TTFT ms':>9} "
          f"{'mean AL':>8} {'outputs':>9}")
    for spec_type, result in report["configs"].items():
        if "skipped" in result:
            print(f"{spec_type:>22}  skipped: {result['skipped']}")
            continue
        for row in result["levels"]:
            ref = base.get(row["concurrency"])
            speedup = row["tokens_per_s"] / ref["tokens_per_s"] if ref else float("nan")
            same = "sampled" if row["output_digests"] is None else \
                "same" if ref and ref["output_digests"] == row["output_digests"] else "DIFFERENT"
            al = f"{row['mean_acceptance_length']:.2f}" if row["mean_acceptance_length"] else "-"
            print(f"{spec_type:>22} {row['concurrency']:>5d} {row['tokens_per_s']:>9.1f} {speedup:>7.2f}x "
                  f"{row['mean_latency_s']:>10.2f} {row['mean_ttft_ms']:>9.1f} {al:>8} {same:>9}")


if __name__ == "__main__":
    main()
