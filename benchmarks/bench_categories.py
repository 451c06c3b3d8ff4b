"""Per-category benchmark of the bundled model through the server: the baseline against every
speculative type, with `specserve bench` (run, then compare and report).

Configurations: no speculation, every registered type that needs no draft model, and each
`draft-*` type whose drafter is shipped for the bundled model (`specserve/bundled/stdlib-coder-*`,
run at the `--spec-draft-n-max` it was trained for) or given with `--drafter TYPE=DIR`. One
`specserve serve` per configuration (`--threads 1`, greedy); in each round the servers are started together and take turns (an idle server sleeps), so a
change in the machine's load hits every configuration alike; every round starts fresh servers,
so methods that learn across requests gain nothing from earlier rounds. For each
configuration every sample keeps its fastest round (highest decode tokens/s, as timeit keeps
the minimum time), so load spikes from other jobs on a shared machine mostly drop out; the
outputs are greedy and the same in every round. Prints the compare
table and writes the runs, compare.json, a report folder (report.md + PNG charts) and
bench_categories.json under --out.

    .venv/bin/python benchmarks/bench_categories.py [--out runs/bench_categories] [--osl 128]
        [--limit 8] [--rounds 1] [--types ngram-simple,...] [--drafter TYPE=DIR] [-- extra server options]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from pathlib import Path


ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from serve_process import ServeProcess  # noqa: E402
from specserve.bench.records import write_json  # noqa: E402
from specserve.bench.results import SampleResult  # noqa: E402
from specserve.bench.summary import summarise  # noqa: E402
from specserve.bundled import STDLIB_CODER, shipped_drafters  # noqa: E402
from specserve.speculative.registry import available_types, proposer_class  # noqa: E402

ENV = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")


def bundled_drafter(model: Path, spec_type: str) -> tuple[Path, int] | None:
    """The drafter shipped for the bundled model and the --spec-draft-n-max it was trained for."""
    return shipped_drafters().get(spec_type) if model.resolve() == STDLIB_CODER else None


def configurations(args) -> tuple[dict[str, tuple[Path, int | None] | None], list[str]]:
    """({type: (drafter folder, n_max) or None}, types skipped for want of a drafter)."""
    drafters = dict(item.split("=", 1) for item in args.drafter)
    types = args.types.split(",") if args.types else [t for t in available_types() if t != "none"]
    chosen, skipped = {"none": None}, []
    for t in types:
        if not proposer_class(t).model_drafter:
            chosen[t] = None
        elif t in drafters:
            chosen[t] = (Path(drafters[t]), None)
        elif bundled_drafter(Path(args.model), t):
            chosen[t] = bundled_drafter(Path(args.model), t)
        else:
            skipped.append(t)
    return chosen, skipped


def server_args(spec_type: str, drafter: tuple[Path, int | None] | None, args) -> list[str]:
    out = ["--threads", "1", "-np", str(args.concurrency), "--temp", "0", "--spec-type", spec_type,
           *args.server_args]
    if drafter is not None:
        folder, n_max = drafter
        out += ["-md", str(folder)] + (["--spec-draft-n-max", str(n_max)] if n_max else [])
    return out


def fastest_rounds(records: list[dict]) -> dict:
    """One run record whose samples are each the fastest of their rounds (failures count as slowest)."""
    merged = dict(records[0])
    results = []
    for samples in zip(*(r["results"] for r in records)):
        results.append(max(samples, key=lambda s: (s["success"], s["pred_t_s"] or 0.0)))
    merged["results"] = results
    merged["rounds"] = len(records)
    typed = [SampleResult(**s) for s in results]
    merged["summary"] = summarise(typed, sum(r["elapsed"] for r in records) / len(records))
    failed = [s for s in typed if not s.success]
    merged["completed_samples"], merged["failed_samples"] = len(typed) - len(failed), len(failed)
    merged["failures"] = [{"question_id": s.question_id, "category": s.category, "error": s.error} for s in failed]
    return merged


def bench(*args: str, log: Path | None = None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "specserve", "bench", *args]
    result = subprocess.run(cmd, capture_output=True, text=True, env=ENV)
    if log is not None:
        log.write_text(result.stdout + result.stderr)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-m", "--model", default=str(STDLIB_CODER))
    parser.add_argument("--out", default=str(ROOT / "runs" / "bench_categories"))
    parser.add_argument("--bench", default="qualitative")
    parser.add_argument("--limit", type=int, default=8, help="samples per category")
    parser.add_argument("--osl", type=int, default=128)
    parser.add_argument("--concurrency", type=int, default=1, help="client concurrency and server slots")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--types", help="comma-separated spec types (default: every registered type)")
    parser.add_argument("--drafter", action="append", default=[], help="TYPE=DIR: drafter folder for a draft-* type")
    parser.add_argument("server_args", nargs="*", help="extra `specserve serve` options (after --)")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    configs, no_drafter = configurations(args)
    failed_start: dict[str, str] = {}
    rounds: dict[str, list[dict]] = {}
    workload = ["--bench", args.bench, "--limit", str(args.limit), "--osl", str(args.osl),
                "--concurrency", str(args.concurrency), "--extra-inputs", '{"temperature": 0}', "--no-progress"]
    for round_no in range(1, args.rounds + 1):
        servers = {t: ServeProcess(args.model, server_args(t, d, args), out / f"server-{t}.log")
                   for t, d in configs.items()
                   if t not in failed_start}
        try:
            for t, server in servers.items():
                reason = server.wait()
                if reason is not None:
                    failed_start[t] = reason
                    print(f"{t}: server did not start: {reason}", file=sys.stderr)
            for t, server in servers.items():
                if t in failed_start:
                    continue
                path = out / f"{t}.round{round_no}.json"
                result = bench("run", "--url", server.url, *workload, "--label", t, "--output", str(path),
                               log=out / f"bench-{t}.round{round_no}.log")
                if not path.is_file():
                    failed_start[t] = f"bench run failed: {result.stderr.strip().splitlines()[-1:]}"
                    continue
                record = json.loads(path.read_text())
                speed = record["summary"]["overall"]["avg_pred_t_s"] or 0.0
                print(f"round {round_no}: {t:14s} {speed:8.2f} tokens/s, {record['failed_samples']} failed, "
                      f"{record['elapsed']:.1f} s", flush=True)
                rounds.setdefault(t, []).append(record)
        finally:
            for server in servers.values():
                server.stop()
    if "none" not in rounds:
        print("the baseline did not run", file=sys.stderr)
        return 1
    kept = {}
    for t, records in rounds.items():
        kept[t] = out / f"{t}.json"
        write_json(kept[t], fastest_rounds(records))
    specs = [str(kept[t]) for t in kept if t != "none"]
    compared = bench("compare", str(kept["none"]), *specs, "--json", str(out / "compare.json"))
    print(compared.stdout, end="")
    reported = bench("report", *map(str, kept.values()), "--out", str(out / "report"),
                     "--title", "Bundled model: speculative types per category")
    print(reported.stdout, end="", file=sys.stderr)
    summary = {
        "machine": {"platform": platform.platform(), "python": platform.python_version(),
                    "cpus": os.cpu_count()},
        "settings": {k: v for k, v in vars(args).items()},
        "configurations": list(configs), "skipped_no_drafter": no_drafter, "failed": failed_start,
        "compare": json.loads((out / "compare.json").read_text()) if specs else None,
    }
    (out / "bench_categories.json").write_text(json.dumps(summary, indent=2) + "\n")
    if no_drafter:
        print(f"skipped (no bundled drafter; give --drafter TYPE=DIR): {', '.join(no_drafter)}")
    if failed_start:
        print("failed: " + "; ".join(f"{t}: {why}" for t, why in failed_start.items()))
    print(f"wrote {out}/bench_categories.json, {out}/compare.json and {out}/report/report.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
