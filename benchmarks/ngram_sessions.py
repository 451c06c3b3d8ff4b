"""What each n-gram method keeps between a slot's requests, measured: specserve's default against the
llama.cpp-identical settings over one long session of requests on one slot.

The session is the bundled `qualitative` prompt set in file order (coding, code editing, maths,
summaries, questions, writing, multi-turn), every turn a request. A later turn of a conversation is
sent as a completions client sends it: the earlier prompt, the reply, a newline, the new message
(specserve/bench/samples.py completion_prompt). Requests go one after another to one slot, greedy,
ignoring EOS, a fixed number of tokens each; one engine per configuration lives through the whole
session, as one llama-server would.

For each configuration: drafted and accepted tokens over the session, acceptance rate, and speedup
over no speculation in process CPU time (robust to other jobs on a shared machine; run with -t 1),
best of --repeats. Every configuration's output must equal the baseline's (it is checked).

    .venv/bin/python benchmarks/ngram_sessions.py [-n 128] [--repeats 2] [--limit N] [--out runs/ngram_sessions.json]
        [--table-out docs/results/ngram_sessions.md] [--from-json runs/ngram_sessions.json] [--note TEXT]
"""
from __future__ import annotations

import argparse
import sys
import sysconfig
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from specserve import LLM, SamplingParams, kernels  # noqa: E402
from specserve.bench.samples import completion_prompt, load_bundled  # noqa: E402
from specserve.llm import BUNDLED_MODEL  # noqa: E402
from specserve.models.tokenizer import Tokenizer  # noqa: E402

import results_table  # noqa: E402
from ngram_methods import build_static_cache  # noqa: E402

# (label, spec type, options); "llama.cpp" rows set every option that restores llama.cpp's behaviour
LLAMACPP_MAP_K = {"spec_ngram_map_k_begin": "trust"}
LLAMACPP_MAP_K4V = {"spec_ngram_map_k4v_begin": "trust", "spec_ngram_map_k4v_draft": "latest"}
SHORT_K4V = {"spec_ngram_map_k4v_size_n": 2, "spec_ngram_map_k4v_size_m": 3}
STATIC = "{static}"          # the static cache file, built from --static-corpus
CONFIGS = [
    ("none (baseline)", "none", {}),
    ("ngram-map-k", "ngram-map-k", {}),
    ("ngram-map-k, llama.cpp", "ngram-map-k", LLAMACPP_MAP_K),
    ("ngram-map-k4v", "ngram-map-k4v", {}),
    ("ngram-map-k4v, llama.cpp", "ngram-map-k4v", LLAMACPP_MAP_K4V),
    ("ngram-map-k4v, draft winner", "ngram-map-k4v", {"spec_ngram_map_k4v_draft": "winner"}),
    ("ngram-map-k4v n=2 m=3", "ngram-map-k4v", SHORT_K4V),
    ("ngram-map-k4v n=2 m=3, llama.cpp", "ngram-map-k4v", {**SHORT_K4V, **LLAMACPP_MAP_K4V}),
    ("ngram-map-k4v n=2 m=3, draft winner", "ngram-map-k4v", {**SHORT_K4V, "spec_ngram_map_k4v_draft": "winner"}),
    ("ngram-cache", "ngram-cache", {}),
    ("ngram-cache, llama.cpp", "ngram-cache", {"spec_ngram_cache_context": "slot"}),
    ("ngram-cache, ties lowest-id", "ngram-cache", {"spec_ngram_cache_ties": "lowest-id"}),
    ("ngram-cache + static", "ngram-cache", {"lookup_cache_static": STATIC}),
    ("ngram-cache + static, llama.cpp", "ngram-cache",
     {"lookup_cache_static": STATIC, "spec_ngram_cache_context": "slot"}),
    ("ngram-cache + static, ties lowest-id", "ngram-cache",
     {"lookup_cache_static": STATIC, "spec_ngram_cache_ties": "lowest-id"}),
]


def session_turns(limit: int | None) -> list[list[str]]:
    """The conversations of the session (each a list of user messages)."""
    samples = load_bundled("qualitative")
    return [s.turns for s in (samples[:limit] if limit else samples)]


def run_session(spec_type: str, options: dict, conversations: list[list[str]], n_tokens: int) -> dict:
    llm = LLM(None, spec_type=spec_type, n_parallel=1, **options)
    params = SamplingParams(temperature=0, max_tokens=n_tokens, ignore_eos=True)
    outputs, drafted, accepted, cpu_s = [], 0, 0, 0.0
    for turns in conversations:
        conversation = ""
        for text in turns:
            prompt = completion_prompt(conversation, text)
            cpu0 = time.process_time()
            out = llm.generate(prompt, params)[0]
            cpu_s += time.process_time() - cpu0
            outputs.append(out.token_ids)
            drafted += out.timings.get("draft_n", 0)
            accepted += out.timings.get("draft_n_accepted", 0)
            conversation = prompt + out.text
    return {"cpu_s": cpu_s, "requests": len(outputs), "tokens": sum(len(o) for o in outputs),
            "drafted": drafted, "accepted": accepted, "outputs": outputs}


def measure(args) -> dict:
    conversations = session_turns(args.limit)
    configs = [c for c in CONFIGS if not args.only or c[0] in args.only.split(",") or c[1] == "none"]
    static, n_static = build_static_cache(Path(args.static_corpus), Tokenizer(BUNDLED_MODEL),
                                          Path(args.out).with_suffix(".static.bin"), args.static_bytes)
    configs = [(label, spec_type, {k: str(static) if v == STATIC else v for k, v in options.items()})
               for label, spec_type, options in configs]
    best: dict[str, dict] = {}
    t_start = time.perf_counter()
    for _ in range(args.repeats):              # repeats outermost: drift hits every configuration alike
        for label, spec_type, options in configs:
            run = run_session(spec_type, options, conversations, args.n_tokens)
            if label not in best or run["cpu_s"] < best[label]["cpu_s"]:
                best[label] = run
    baseline = best["none (baseline)"]
    rows = []
    for label, spec_type, options in configs:
        run = best[label]
        rows.append({"label": label, "spec_type": spec_type, "options": options,
                     **{k: v for k, v in run.items() if k != "outputs"},
                     "speedup": baseline["cpu_s"] / run["cpu_s"],
                     "same_as_baseline": run["outputs"] == baseline["outputs"]})
    return {"n_tokens": args.n_tokens, "threads": kernels.threads(), "repeats": args.repeats,
            "conversations": len(conversations), "machine": results_table.machine(),
            "static_cache": {"corpus": args.static_corpus, "tokens": n_static},
            "minutes": (time.perf_counter() - t_start) / 60, "results": rows}


def markdown_table(record: dict) -> str:
    lines = ["| configuration | drafted | accepted | acc. rate | speedup | output = baseline |",
             "|---|---|---|---|---|---|"]
    for r in record["results"]:
        if r["spec_type"] == "none":
            continue
        rate = r["accepted"] / r["drafted"] if r["drafted"] else None
        lines.append(f"| {r['label']} | {r['drafted']} | {r['accepted']} | {results_table.fmt(rate, 3)} | "
                     f"{r['speedup']:.2f}x | {'yes' if r['same_as_baseline'] else 'NO'} |")
    base = next(r for r in record["results"] if r["spec_type"] == "none")
    static = record["static_cache"]
    lines += ["", f"{base['requests']} requests ({record['conversations']} conversations), {base['tokens']} "
              f"generated tokens; no speculation took {base['cpu_s']:.1f} s of CPU time. \"+ static\": a static "
              f"cache of {static['tokens']} tokens of Python's standard library, as `specserve lookup create` "
              "writes it.", "",
              "\"llama.cpp\" rows set every option that restores llama.cpp's behaviour "
              "([ngram.md](../ngram.md#what-each-method-keeps-between-requests)); the others use specserve's "
              "defaults unless the label says otherwise. Drafted and accepted tokens are the sums of the "
              "requests' `draft_n` and `draft_n_accepted`."]
    return "\n".join(lines)


def write_markdown(args, record: dict) -> None:
    conditions = (f"The bundled model, the `qualitative` prompt set as one session on one slot, greedy, "
                  f"{record['n_tokens']} tokens per request, {record['threads']} thread(s), best of "
                  f"{record['repeats']} by CPU time.")
    results_table.write_table(args, "n-gram state across requests: specserve's defaults against llama.cpp's",
                              markdown_table(record), conditions, measured_on=record["machine"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", "--n-tokens", type=int, default=128, help="tokens generated per request")
    parser.add_argument("-t", "--threads", type=int, default=1, help="compute threads (default 1)")
    parser.add_argument("--repeats", type=int, default=2, help="runs per configuration; the fastest counts")
    parser.add_argument("--limit", type=int, default=None, help="only the first N conversations")
    parser.add_argument("--only", default="", help="comma list of configuration labels (the baseline always runs)")
    parser.add_argument("--static-corpus", default=sysconfig.get_paths()["stdlib"],
                        help="folder of .py files for the static cache (default: this Python's standard library)")
    parser.add_argument("--static-bytes", type=int, default=2_000_000, help="text read from --static-corpus")
    parser.add_argument("--out", default="runs/ngram_sessions.json")
    results_table.add_options(parser, "ngram_sessions")
    args = parser.parse_args()
    earlier = results_table.load_runs(args)
    if earlier:
        write_markdown(args, earlier[-1])
        return 0
    kernels.set_threads(args.threads)
    record = measure(args)
    print(markdown_table(record))
    results_table.write_json(Path(args.out), record)
    write_markdown(args, record)
    return 0 if all(r["same_as_baseline"] for r in record["results"]) else 1


if __name__ == "__main__":
    sys.exit(main())
