"""The method table: every speculative method on the bundled model, side by side.

For each --spec-type the registry knows (plus no speculation as the baseline), on code and
free-text prompts, at temperature 0 and 1: tau (mean acceptance length = 1 + accepted draft
tokens per verification step), acceptance per draft position, decode tokens/s and speedup
over no speculation in the same setting. The speedup is measured in process CPU time (one
torch thread by default), which other jobs on a shared machine do not distort; tok/s is the
wall-clock decode rate. The drafters are the ones shipped for the bundled model
(specserve.bundled.STDLIB_CODER_DRAFTERS), served as shipped (specserve.bundled.served_options: their draft
lengths for this CPU, at T=0 and at T > 0, and `--quant-draft q8` on CPUs with int8 dot products, else int8
for the draft-simple, EAGLE-3 and MTP chains; `--quant-draft none` runs every drafter in bfloat16); a type
without one is skipped with a note.
At T=1 the model drafters also run as "+ q": drafts sampled from q and verified by rejection sampling
(`--spec-draft-sample`; DFlash `--spec-dflash-sample sample`; DSpark samples its chain as served), and
where a drafter is served without drafts for sampled requests (`--spec-draft-n-max-sampled 0`) with its
T=0 length, so that the row shows what its sampled path does; a chain served with sampled drafts has
no "+ q" row (its own row is that path).
Every (prompt set, temperature) cell, and every repeat of it, runs on a new engine, so methods that learn
across requests (ngram-mod, ngram-cache) never meet a set they have already seen. Each repeat of a cell
also runs no speculation right beside it (alternating which goes first), and the speedup is the best
baseline over the best run: on a shared machine the speed drifts by more than these ratios within
minutes.
Single stream (one slot, requests one after another) unless `-np N` batches each prompt set over N
slots; `--schedule` adds --spec-schedule; `--methods` picks spec types. Prints the table, writes JSON and the
Markdown table the documentation links (docs/results/method_table.md; see benchmarks/results_table.py).

    .venv/bin/python benchmarks/method_table.py [--n-tokens 128] [--out runs/method_table.json]
        [--methods draft-simple,draft-dspark] [-np 4 --schedule] [--ngram-first] [--drafter draft-dspark=DIR]
        [--table-out FILE] [--from-json FILE] [--note TEXT]
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path


from specserve import LLM, SamplingParams
from specserve import kernels
from specserve.errors import SpecServeError
from specserve.bundled import served_options, served_quant, shipped_drafters
from specserve.llm import BUNDLED_MODEL
from specserve.speculative.registry import available_types, model_drafter_type, proposer_class

from prompt_sets import CODE_PROMPTS, TEXT_PROMPTS
import results_table

PROMPT_SETS = {"code": CODE_PROMPTS, "free-text": TEXT_PROMPTS}

MODEL_DRAFTERS = ("draft-simple", "draft-eagle3", "draft-mtp")
QUANT_WORDS = {"served": "as served (q8 with int8 dot products, else int8 for the draft-simple, EAGLE-3 and MTP "
                         "chains and bfloat16 for the block drafters)", "none": "bfloat16", "int8": "int8", "q8": "q8"}


def bundled_drafters(target: Path) -> dict[str, Path]:
    """spec type -> drafter folder shipped for the target (only the bundled model has them)."""
    if target.resolve() != BUNDLED_MODEL.resolve():
        return {}
    return {spec_type: folder for spec_type, (folder, _) in shipped_drafters().items()}


def configurations(target: Path, methods: list[str] | None = None, schedule: bool = False,
                   drafters: dict[str, Path] | None = None, ngram_first: bool = False):
    """(label, spec type, draft folder, extra options, temperatures) for every known type (or those in
    `methods`); plus skip notes. `schedule` adds --spec-schedule to every speculative configuration;
    `drafters` (spec type -> folder) replaces shipped drafters; `ngram_first` adds each model drafter behind
    ngram-mod (which then drafts for greedy requests only, --spec-ngram-greedy-only)."""
    drafters = {**bundled_drafters(target), **(drafters or {})}
    configs, skipped = [("no speculation", "none", None, {}, (0.0, 1.0))], []
    for spec_type in available_types():
        if spec_type == "none" or (methods and spec_type not in methods):
            continue
        folder = drafters.get(spec_type)
        if proposer_class(spec_type).needs_draft_model and folder is None:
            skipped.append((spec_type, "no drafter shipped for this model"))
            continue
        extra = {"spec_schedule": True} if schedule else {}
        configs.append((spec_type, spec_type, folder, extra, (0.0, 1.0)))
        if spec_type in MODEL_DRAFTERS and not served_options(spec_type).get("spec_draft_sample"):
            configs.append((f"{spec_type} + q", spec_type, folder, {**extra, "spec_draft_sample": True}, (1.0,)))
        elif spec_type == "draft-dflash":       # DFlash drafts greedily by default
            configs.append((f"{spec_type} + q", spec_type, folder, {**extra, "spec_dflash_sample": "sample"}, (1.0,)))
        elif spec_type == "draft-dspark":       # DSpark samples its chain as served (the row differs in length only)
            configs.append((f"{spec_type} + q", spec_type, folder, extra, (1.0,)))
        if ngram_first and proposer_class(spec_type).model_drafter:
            configs.append((f"ngram-mod + {spec_type}", f"ngram-mod,{spec_type}", folder,
                            {**extra, "spec_ngram_greedy_only": True}, (0.0, 1.0)))
    return configs, skipped


WARM_UP = "import os\nimport sys\n\n\ndef read_lines(path):\n    with open(path) as f:\n        return f.read()"


def run_set(llm, prompts, temperature, n_tokens, parallel=1, seed=0):
    params = [SamplingParams(temperature=temperature, max_tokens=n_tokens, ignore_eos=True, seed=seed + i)
              for i in range(len(prompts))]
    cpu0 = time.process_time()
    if parallel > 1:            # all prompts at once, batched over the slots
        outs = llm.generate(prompts, params)
    else:                       # one request at a time
        outs = [llm.generate(p, sp)[0] for p, sp in zip(prompts, params)]
    cpu_s = time.process_time() - cpu0
    steps = sum(o.draft_stats.get("verify_steps", 0) for o in outs)
    accepted = sum(o.draft_stats.get("accepted", 0) for o in outs)
    drafted = sum(o.draft_stats.get("drafted", 0) for o in outs)
    per_pos: list[int] = []
    for o in outs:
        for i, c in enumerate(o.draft_stats.get("accepted_per_pos", [])):
            if len(per_pos) <= i:
                per_pos.append(0)
            per_pos[i] += c
    tokens = sum(o.timings["predicted_n"] for o in outs)
    ms = sum(o.timings["predicted_ms"] for o in outs)
    after_first = tokens - len(outs)              # tokens produced by decode steps (the first comes from prefill)
    return {"tau": 1 + accepted / steps if steps else 1.0,
            "tokens_per_forward": after_first / max(after_first - accepted, 1), "verify_steps": steps,
            "drafted": drafted,
            "accepted": accepted, "acceptance_per_position": [round(c / steps, 3) for c in per_pos] if steps else [],
            "tokens": tokens, "tokens_per_s": 1000 * after_first / ms if ms else 0.0, "cpu_s": cpu_s,
            "token_ids": [o.token_ids for o in outs]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-m", "--model", default=str(BUNDLED_MODEL))
    parser.add_argument("-n", "--n-tokens", type=int, default=128)
    parser.add_argument("--n-max", type=int, default=3, help="--spec-draft-n-max for the n-gram types")
    parser.add_argument("--draft-n-max", type=int, default=None,
                        help="--spec-draft-n-max for the model drafters at every temperature (default: the lengths "
                             "the shipped ones are served with, specserve.bundled.served_options)")
    parser.add_argument("--sets", default="code,free-text")
    parser.add_argument("--temperatures", default="0,1")
    parser.add_argument("-t", "--threads", type=int, default=1,
                        help="compute threads (default 1, so that CPU time measures the work)")
    parser.add_argument("--repeats", type=int, default=1, help="runs per setting; the fastest (CPU time) is kept")
    parser.add_argument("--methods", default="", help="comma-separated spec types to run (default: all)")
    parser.add_argument("-np", "--parallel", type=int, default=1,
                        help="slots; above 1 each prompt set is submitted at once and batched")
    parser.add_argument("--schedule", action="store_true", help="--spec-schedule for every speculative method")
    parser.add_argument("--ngram-first", action="store_true",
                        help="also run each model drafter behind ngram-mod (`--spec-type ngram-mod,TYPE "
                             "--spec-ngram-greedy-only`)")
    parser.add_argument("--quant-draft", default="served", choices=("served", "none", "int8", "q8"),
                        help="draft weights: as the shipped drafters are served (specserve.bundled.served_quant), "
                             "all bfloat16, all int8, or all q8")
    parser.add_argument("--drafter", action="append", default=[], metavar="TYPE=DIR",
                        help="use the drafter in DIR for spec type TYPE instead of the shipped one (repeatable)")
    parser.add_argument("--out", default="runs/method_table.json")
    results_table.add_options(parser, "method_table")
    args = parser.parse_args()
    earlier = results_table.load_runs(args)
    if earlier is not None:
        write_markdown(args, earlier[-1])
        return
    if args.threads > 0:
        kernels.set_threads(args.threads)
    target = Path(args.model)
    temps = [float(t) for t in args.temperatures.split(",")]
    sets = args.sets.split(",")
    own = dict(item.split("=", 1) for item in args.drafter)
    configs, skipped = configurations(target, [m for m in args.methods.split(",") if m], args.schedule,
                                      {t: Path(d) for t, d in own.items()}, args.ngram_first)
    results, t_start, draft_lengths = [], time.perf_counter(), {}
    baseline: dict[tuple, dict] = {}
    for label, spec_type, folder, extra, config_temps in configs:
        drafter_type = model_drafter_type(spec_type.split(","))      # (ngram-mod,draft-x: draft-x's options)
        model_drafter = drafter_type is not None
        lengths = {"spec_draft_n_max": args.n_max}
        if model_drafter:
            lengths = {"spec_draft_n_max": args.draft_n_max} if args.draft_n_max else \
                {k: v for k, v in served_options(drafter_type).items() if k != "quant_draft"}
            if label.endswith(" + q") and lengths.get("spec_draft_n_max_sampled") == 0:
                del lengths["spec_draft_n_max_sampled"]          # the sampled path, drafting as far as at T=0
            draft_lengths.setdefault(drafter_type, [lengths["spec_draft_n_max"],         # as served: the plain row's
                                                 lengths.get("spec_draft_n_max_sampled", lengths["spec_draft_n_max"])])
        quant = args.quant_draft if args.quant_draft != "served" else (served_quant(drafter_type) or "none")
        if quant != "none" and model_drafter:
            extra = {**extra, "quant_draft": quant}

        def fresh_engine():
            """Each run on a new engine: methods that learn across requests (ngram-mod, ngram-cache) must
            not meet a prompt set, or a repeat, they have already seen. It is warmed up with one short
            request per slot (32 tokens), all at once, so that first-call costs (buffers, and with
            --spec-schedule the first draft calls for that many slots, which it times) stay out of the
            measurement."""
            llm = LLM(target, draft_model=folder, spec_type=spec_type, n_parallel=args.parallel, **{**lengths, **extra})
            warm = [llm.tokenizer.encode(WARM_UP)[:8 + i] for i in range(args.parallel)]
            llm.generate(warm, [SamplingParams(temperature=0, max_tokens=32)] * len(warm))
            return llm

        try:
            llm = fresh_engine()
        except SpecServeError as exc:
            skipped.append((label, str(exc)))
            continue
        if spec_type == "none":
            plain = llm
        prompts = {name: [llm.tokenizer.encode(p) for p in PROMPT_SETS[name]] for name in sets}
        for temp in [t for t in temps if t in config_temps]:
            for name in sets:
                runs, base_runs = [], []
                for i in range(args.repeats):
                    # each repeat runs no speculation right beside the method (alternating which goes first):
                    # a shared machine's speed drifts by more than these ratios within minutes
                    for baseline_run in ((False, True) if i % 2 == 0 else (True, False)):
                        if baseline_run and spec_type == "none":
                            continue
                        engine, into = (plain, base_runs) if baseline_run else (fresh_engine(), runs)
                        into.append(run_set(engine, prompts[name], temp, args.n_tokens, args.parallel))
                r = min(runs, key=lambda x: x["cpu_s"])
                token_ids = r.pop("token_ids")
                if spec_type == "none":
                    baseline[(name, temp)] = {"cpu_s": r["cpu_s"], "token_ids": token_ids}
                base = baseline[(name, temp)]
                r["baseline_cpu_s"] = min(x["cpu_s"] for x in base_runs) if base_runs else r["cpu_s"]
                r["speedup"] = r["baseline_cpu_s"] / r["cpu_s"]
                if temp == 0:
                    r["same_tokens_as_baseline"] = token_ids == base["token_ids"]
                results.append({"method": label, "spec_type": spec_type, "drafter": str(folder) if folder else None,
                                "set": name, "temperature": temp, **r})
                print(f"  {label:<22} {name:<9} T={temp:g}: tau {r['tau']:.2f} {r['tokens_per_s']:7.1f} tok/s "
                      f"cpu {r['cpu_s']:.2f}s speedup x{r['speedup']:.2f}", flush=True)
    print_table(results, sets, temps, target, args, skipped)
    out = {"model": str(target), "n_tokens": args.n_tokens, "n_max": args.n_max, "draft_lengths": draft_lengths,
           "parallel": args.parallel, "schedule": args.schedule, "quant_draft": args.quant_draft,
           "threads": kernels.threads(),
           "machine": results_table.machine(), "minutes": (time.perf_counter() - t_start) / 60, "results": results,
           "skipped": [{"method": m, "reason": r} for m, r in skipped]}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2))
    print(f"\nwrote {args.out}")
    write_markdown(args, out)


def markdown_table(record: dict) -> str:
    """A row per method, a column per (prompt set, temperature): tau / speedup; then the baseline's speed,
    the acceptance per draft position in the first column's setting and whether greedy output was identical."""
    results = record["results"]
    sets = list(dict.fromkeys(r["set"] for r in results))
    temps = sorted(dict.fromkeys(r["temperature"] for r in results))
    cols = [(s, t) for t in temps for s in sets]
    by = {(r["method"], r["set"], r["temperature"]): r for r in results}
    by_method = dict.fromkeys(r["method"] for r in results)
    out = ["| method | " + " | ".join(f"{s.replace('-', ' ')} T={t:g}" for s, t in cols) + " |",
           "|---|" + "---|" * len(cols)]
    for method in by_method:
        if method == "no speculation":
            continue
        cells = [f"{r['tau']:.2f} / {r['speedup']:.2f}x" if (r := by.get((method, s, t))) else "" for s, t in cols]
        out.append(f"| {method} | " + " | ".join(cells) + " |")
    first = cols[0]
    base = [f"{by[('no speculation', s, t)]['tokens_per_s']:.0f} tok/s ({s.replace('-', ' ')}, T={t:g})"
            for s, t in cols if ("no speculation", s, t) in by]
    out += ["", "(tau / speedup; tau counts only steps that verified a draft, so a method that rarely drafts "
            "can show tau 1.00. \"+ q\": drafts sampled from q and verified by rejection sampling, at the T=0 "
            "length where the drafter is served without drafts for sampled requests."
            + (" \"ngram-mod + X\": `--spec-type ngram-mod,X --spec-ngram-greedy-only`, ngram-mod (n-match 24, "
               "n-min 48, n-max 64) drafting first for greedy requests, X where it finds nothing and for sampled "
               "requests as X is served." if any(m.startswith("ngram-mod + ") for m in by_method) else "")
            + ")", "",
            "No speculation decoded at " + ", ".join(base) + "."]
    drafted = [r for r in results if (r["set"], r["temperature"]) == first and r["acceptance_per_position"]]
    if drafted:
        out += ["", f"Acceptance per draft position ({first[0].replace('-', ' ')}, T={first[1]:g}):", ""]
    for r in drafted:
        out.append(f"- {r['method']}: " + ", ".join(f"{p:.2f}" for p in r["acceptance_per_position"][:8]))
    lossy = [r["method"] for r in results if r.get("same_tokens_as_baseline") is False]
    out += ["", "Greedy output identical to no speculation: "
            + ("yes, for every method." if not lossy else f"NO for {', '.join(lossy)}.")]
    for skipped in record.get("skipped", []):
        out.append(f"Skipped {skipped['method']}: {skipped['reason']}.")
    return "\n".join(out)


def draft_length_words(record: dict) -> str:
    """The draft lengths a record ran with, in words (older records: one length for the block drafters)."""
    if "draft_lengths" not in record:
        return f"`--spec-draft-n-max` {record['n_max']} ({record['block_n_max']} for the block drafters)"
    per = ", ".join(f"{t} {n}" + (f" ({s} at T > 0)" if s != n else "")
                    for t, (n, s) in record["draft_lengths"].items())
    return f"`--spec-draft-n-max` {per}" + (f", {record['n_max']} for the n-gram types" if per else "")


def write_markdown(args, record: dict) -> None:
    slots = record.get("parallel", 1)
    streams = "single stream" if slots == 1 else f"{slots} slots, each prompt set submitted at once"
    if record.get("schedule"):
        streams += ", `--spec-schedule`"
    conditions = (f"{Path(record['model']).name}, {record['n_tokens']} tokens per prompt, {streams}, "
                  f"{record['threads']} thread(s), {draft_length_words(record)}, draft weights "
                  f"{QUANT_WORDS[record.get('quant_draft', 'none')]}; speedup in CPU time over no speculation.")
    results_table.write_table(args, "Every method on the bundled model", markdown_table(record), conditions,
                              record.get("machine") or None)


def print_table(results, sets, temps, target, args, skipped) -> None:
    print(f"\nmethod table: {target.name}, {args.n_tokens} tokens per prompt, {len(PROMPT_SETS[sets[0]])} prompts "
          f"per set, --spec-draft-n-max {args.n_max} for the n-gram types, {args.parallel} slot(s), "
          f"{kernels.threads()} threads\n")
    cols = [(s, t) for t in temps for s in sets]
    head = f"{'method':<22}" + "".join(f" | {s} T={t:g}".ljust(22) for s, t in cols)
    print(head)
    print(f"{'':<22}" + "".join(f" | {'tau':>6} {'speedup':>8}".ljust(22) for _ in cols))
    print("-" * len(head))
    by = {(r["method"], r["set"], r["temperature"]): r for r in results}
    for method in dict.fromkeys(r["method"] for r in results):
        cells = []
        for s, t in cols:
            r = by.get((method, s, t))
            cells.append(f" | {r['tau']:6.2f} {r['speedup']:7.2f}x".ljust(22) if r else " | " + "-".ljust(19))
        print(f"{method:<22}" + "".join(cells))
    print("\ntokens per target decode forward (code T=0 / free-text T=0), counting steps without a draft:")
    for method in dict.fromkeys(r["method"] for r in results):
        vals = [by[(method, s, temps[0])]["tokens_per_forward"] for s in sets if (method, s, temps[0]) in by]
        if vals:
            print(f"  {method:<22} " + " / ".join(f"{v:.2f}" for v in vals))
    print("\nacceptance per draft position (code, T=0):")
    for r in results:
        if r["set"] == sets[0] and r["temperature"] == temps[0] and r["acceptance_per_position"]:
            print(f"  {r['method']:<22} {', '.join(f'{p:.3f}' for p in r['acceptance_per_position'][:8])}")
    lossy = [r["method"] for r in results if r.get("same_tokens_as_baseline") is False]
    print("\ngreedy output identical to no speculation: " + ("yes, every method" if not lossy else
                                                           f"NO for {', '.join(lossy)}"))
    for method, reason in skipped:
        print(f"skipped {method}: {reason}")


if __name__ == "__main__":
    main()
