"""`specserve bench`: SPEED-Bench-style benchmark client (run, sweep), compare and report.

`run` and `sweep` talk to any OpenAI-compatible server (`--url`) or run the engine in this
process (`--model-dir` plus the engine and speculative options of `specserve serve`).
"""
from __future__ import annotations

import argparse
import importlib
import json
import logging
from argparse import Namespace

from ..errors import OptionError
from ..options import MODEL_OPTIONS, add_options, spec_option_values
from ..speculative.option_table import SPEC_OPTIONS, default_spec_options
from ..speculative.registry import all_options

WORKLOAD_DEFAULTS = {"bench": "qualitative", "osl": 256}


def _add_target_options(parser: argparse.ArgumentParser) -> None:
    target = parser.add_argument_group("target (one of --url or --model-dir)")
    target.add_argument("--url", help="OpenAI-compatible server, e.g. localhost:8080 (http:// and /v1 are added)")
    target.add_argument("--model", help="model name sent with each request (default: the server's first model)")
    target.add_argument("--api-key", help="sent as 'Authorization: Bearer KEY'")
    target.add_argument("--timeout", type=float, default=600.0, help="seconds per request (default: 600)")
    target.add_argument("--model-dir", help="run the engine in this process on this model folder instead of "
                                            "a server; takes the engine options below")
    # the engine's options without -m/--model (here --model is the API's model name)
    engine = [o for o in MODEL_OPTIONS if o.dest != "model"]
    add_options(parser, engine, "in-process engine (with --model-dir; -np 0 = the concurrency)", {"parallel": 0})
    add_options(parser, SPEC_OPTIONS, "speculative decoding (with --model-dir)")
    add_options(parser, all_options(), "speculative methods (with --model-dir)")


def _add_workload_options(parser: argparse.ArgumentParser) -> None:
    from ..bench.samples import FORMATS, bundled_sets
    work = parser.add_argument_group("workload")
    work.add_argument("--bench", default=WORKLOAD_DEFAULTS["bench"],
                      help=f"bundled prompt set: {', '.join(bundled_sets())} (default: qualitative)")
    work.add_argument("--bench-file", help="read samples from a .jsonl, .json or .parquet file instead")
    work.add_argument("--bench-format", choices=FORMATS, default="speed",
                      help="row format of --bench-file: speed (SPEED-Bench) or spec (Spec-Bench question.jsonl)")
    work.add_argument("--category", default="all", help="'all' or comma-separated categories (default: all)")
    work.add_argument("--limit", type=int, help="at most this many samples per category")
    work.add_argument("--osl", type=int, default=WORKLOAD_DEFAULTS["osl"],
                      help="max_tokens of every request (default: 256)")
    work.add_argument("--extra-inputs", default="{}",
                      help="JSON object merged into every request body, e.g. '{\"temperature\": 0}'")
    work.add_argument("--endpoint", choices=("chat", "completion"), default="chat",
                      help="/v1/chat/completions (default) or /v1/completions")
    work.add_argument("--no-stream", action="store_true", help="plain JSON responses (no TTFT)")
    work.add_argument("--label", help="name of this run in compare tables and reports "
                                      "(default: the server's speculative types)")
    work.add_argument("--no-progress", action="store_true", help="no progress bar")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="bench_command", metavar="SUBCOMMAND", required=True)
    run = sub.add_parser("run", help="benchmark one server or engine configuration",
                         description="send the samples and print the per-category summary")
    _add_target_options(run)
    _add_workload_options(run)
    run.add_argument("--concurrency", type=int, default=1, help="requests in flight (match the server's -np)")
    run.add_argument("--output", help="write the results as JSON to this file")

    sweep = sub.add_parser("sweep", help="throughput and latency at several concurrency levels",
                           description="run the same samples at each concurrency level")
    _add_target_options(sweep)
    _add_workload_options(sweep)
    sweep.add_argument("--levels", default="1,2,4,8,16", help="comma-separated concurrency levels")
    sweep.add_argument("--output", help="write the results as JSON to this file")

    cmp = sub.add_parser("compare", help="speedup of speculative runs over a baseline run",
                         description="per-category decode speedup, latency speedup and acceptance")
    cmp.add_argument("baseline", help="run JSON without speculation")
    cmp.add_argument("spec", nargs="+", help="run JSON files with speculation")
    cmp.add_argument("--json", dest="json_out", help="also write the comparison as JSON to this file")

    rep = sub.add_parser("report", help="Markdown report with PNG charts",
                         description="report.md and charts from run, sweep and compare JSON files")
    rep.add_argument("files", nargs="+", help="run, sweep or compare JSON files")
    rep.add_argument("--out", required=True, help="folder for report.md and the PNG files")
    rep.add_argument("--baseline", help="the baseline run (default: the first run without speculation)")
    rep.add_argument("--title", default="specserve bench report", help="the report's heading")


def _optional(module: str, package: str):
    """Import a module that needs one of the `bench` extra's packages, with a clear error without it."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name != package:
            raise
        raise OptionError(f"this needs {package}: pip install 'specserve[bench]'") from None


# ---------------------------------------------------------------- run / sweep
def _samples(args):
    from ..bench.samples import load_bundled, load_file, select
    samples = load_file(args.bench_file, args.bench_format) if args.bench_file else load_bundled(args.bench)
    chosen = select(samples, args.category, args.limit)
    if not chosen:
        raise OptionError("no samples selected")
    return chosen


def _workload(args):
    from ..bench.runner import Workload
    try:
        extra = json.loads(args.extra_inputs)
    except json.JSONDecodeError as exc:
        raise OptionError(f"--extra-inputs is not valid JSON: {exc.msg}") from None
    if not isinstance(extra, dict):
        raise OptionError("--extra-inputs must be a JSON object")
    if args.osl < 1:
        raise OptionError(f"--osl must be >= 1, got {args.osl}")
    return Workload(endpoint=args.endpoint, osl=args.osl, extra_inputs=extra, stream=not args.no_stream)


def _changed_spec_options(args) -> dict:
    defaults = default_spec_options()
    return {k: v for k, v in spec_option_values(args).items() if defaults.get(k) != v}


def _target(args, concurrency: int):
    """(target, config entries describing it)."""
    if bool(args.url) == bool(args.model_dir):
        raise OptionError("give exactly one of --url (a server) or --model-dir (run the engine in this process)")
    if args.url:
        HttpTarget = _optional("specserve.bench.http_target", "httpx").HttpTarget
        target = HttpTarget(args.url, args.api_key, args.model, args.timeout, concurrency)
        info = target.describe()
        return target, {"url": info["url"], "model": info.get("model"), "spec_types": info.get("spec_types"),
                        "server_slots": info.get("total_slots")}
    from ..bench.engine_target import EngineTarget
    from .generate import engine_from_args
    engine_args = Namespace(**vars(args))
    engine_args.model = args.model_dir
    engine, tokenizer = engine_from_args(engine_args, n_parallel=args.parallel or concurrency)
    types = [p.name for p in engine.driver.proposers]
    config = {"model_dir": args.model_dir, "model": args.model, "spec_types": types,
              "server_slots": engine.n_parallel, "spec_options": _changed_spec_options(args)}
    return EngineTarget(engine, tokenizer, config), config


def _config(args, target_config: dict, **more) -> dict:
    types = target_config.get("spec_types")
    label = args.label or (",".join(types) or "none" if types is not None else None)
    return {"label": label, **target_config, "bench": None if args.bench_file else args.bench,
            "bench_file": args.bench_file, "bench_format": args.bench_format if args.bench_file else None,
            "category": args.category, "limit": args.limit, "osl": args.osl, "endpoint": args.endpoint,
            "stream": not args.no_stream, "extra_inputs": json.loads(args.extra_inputs), **more}


def _run(args) -> int:
    from ..bench.records import run_record, summary_text, write_json
    from ..bench.runner import run_samples
    if args.concurrency < 1:
        raise OptionError(f"--concurrency must be >= 1, got {args.concurrency}")
    samples, workload = _samples(args), _workload(args)
    target, target_config = _target(args, args.concurrency)
    try:
        results, elapsed = run_samples(target, samples, workload, args.concurrency, not args.no_progress)
    finally:
        target.close()
    record = run_record(_config(args, target_config, concurrency=args.concurrency), samples, results, elapsed)
    print(summary_text(record))
    if args.output:
        write_json(args.output, record)
        print(f"wrote {args.output}")
    return 1 if record["failed_samples"] else 0


def _sweep(args) -> int:
    from ..bench.records import write_json
    from ..bench.sweep import parse_levels, run_sweep, sweep_text
    levels = parse_levels(args.levels)
    samples, workload = _samples(args), _workload(args)
    target, target_config = _target(args, max(levels))
    try:
        stats, failures = run_sweep(target, samples, workload, levels, not args.no_progress)
    finally:
        target.close()
    record = {"kind": "sweep", "config": _config(args, target_config, levels=levels),
              "selected_samples": len(samples), "levels": stats, "failures": failures}
    print(sweep_text(record))
    if args.output:
        write_json(args.output, record)
        print(f"wrote {args.output}")
    return 1 if failures else 0


# ---------------------------------------------------------------- compare / report
def _compare(args) -> int:
    from ..bench.compare import compare, compare_text
    from ..bench.records import load_record, write_json
    result = compare(load_record(args.baseline, ("run",)), [load_record(p, ("run",)) for p in args.spec])
    print(compare_text(result))
    if args.json_out:
        write_json(args.json_out, result)
        print(f"wrote {args.json_out}")
    return 0


def _report(args) -> int:
    from ..bench.records import load_record
    build_report = _optional("specserve.bench.report", "matplotlib").build_report
    records = [load_record(p) for p in args.files]
    baseline = load_record(args.baseline, ("run",)) if args.baseline else None
    for path in build_report(records, args.out, baseline, args.title):
        print(f"wrote {path}")
    return 0


def run(args) -> int:
    logging.getLogger("httpx").setLevel(logging.WARNING)     # no line per request under the progress bar
    return {"run": _run, "sweep": _sweep, "compare": _compare, "report": _report}[args.bench_command](args)
