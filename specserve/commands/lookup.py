"""`specserve lookup create|merge|stats`: n-gram cache files for the ngram-cache type,
interchangeable with llama.cpp's llama-lookup-create / -merge / -stats.

  create  count the 2-grams of a text (tokenized with a model's tokenizer) into a static cache
  merge   sum several cache files into one
  stats   model-free simulation of lookup decoding on a text: drafts from the caches are
          scored against the text's true continuation (llama-lookup-stats)
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

from ..errors import OptionError
from ..models.tokenizer import Tokenizer
from ..speculative.ngram_cache_store import NGRAM_MAX, NGRAM_MIN, NGRAM_STATIC, NgramCache, cache_draft
from .prompt_text import add_text_options, text_from_args


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="lookup_command", metavar="ACTION", required=True)
    create = sub.add_parser("create", help="build a static n-gram cache from a text file",
                            description="Count the 2-grams of a text into a static cache (llama-lookup-create).")
    _text_options(create)
    create.add_argument("-lcs", "--lookup-cache-static", required=True, metavar="FILE", help="cache file to write")
    merge = sub.add_parser("merge", help="sum n-gram cache files",
                           description="Sum the counts of cache files into one (llama-lookup-merge).")
    merge.add_argument("files", nargs="+", metavar="FILE",
                       help="input caches followed by the output file: IN1 [IN2 ...] OUT")
    stats = sub.add_parser("stats", help="simulate lookup decoding on a text (no model run)",
                           description="Draft from the caches along a text and count how many drafted tokens "
                                       "match its true continuation (llama-lookup-stats).")
    _text_options(stats)
    stats.add_argument("-lcs", "--lookup-cache-static", metavar="FILE", help="static cache to draft from")
    stats.add_argument("-lcd", "--lookup-cache-dynamic", metavar="FILE",
                       help="dynamic cache to start from (a missing file starts empty)")
    stats.add_argument("-c", "--ctx-size", type=int, default=4096,
                       help="the text is simulated in chunks of this many tokens (default: 4096)")
    stats.add_argument("--spec-draft-n-max", "--draft-max", dest="draft_max", type=int, default=8,
                       help="most tokens drafted per step (default: 8, as the ngram-cache type drafts)")


def _text_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-m", "--model", default=None,
                        help="model folder whose tokenizer.json is used (default: the bundled model)")
    add_text_options(parser, "text")


def _tokens(args) -> list[int]:
    from ..llm import BUNDLED_MODEL
    text = text_from_args(args, "text")
    tokenizer = Tokenizer(args.model or BUNDLED_MODEL)
    tokens = tokenizer.encode(text)
    print("lookup: tokenization done", file=sys.stderr)
    return tokens


def create(args) -> None:
    tokens = _tokens(args)
    cache = NgramCache()
    cache.update(tokens, NGRAM_STATIC, NGRAM_STATIC, len(tokens))
    print(f"lookup: hashing done, writing file to {args.lookup_cache_static}", file=sys.stderr)
    cache.save(args.lookup_cache_static, order="libstdc++")        # llama-lookup-create's bytes


def merge(args) -> None:
    if len(args.files) < 2:
        raise OptionError("usage: specserve lookup merge IN1 [IN2 ...] OUT (at least one input and the output)")
    (first, *others), output = args.files[:-1], args.files[-1]
    print(f"lookup: loading file {first}", file=sys.stderr)
    merged = NgramCache.load(first)          # the first file is the base, as in llama-lookup-merge
    for path in others:
        print(f"lookup: loading file {path}", file=sys.stderr)
        merged.merge(NgramCache.load(path))
    print(f"lookup: saving file {output}", file=sys.stderr)
    merged.save(output, order="libstdc++")          # llama-lookup-merge's bytes


def simulate(tokens: list[int], n_ctx: int, n_draft: int, dynamic: NgramCache, static: NgramCache,
             ties: str = "libstdc++") -> dict:
    """llama-lookup-stats: every full chunk of n_ctx tokens (a last partial chunk is skipped)
    is "generated" token by token from its first token; at each step a draft is made from the
    caches and its tokens are accepted while they equal the text. The context cache grows with
    every token and is merged into the dynamic cache after each chunk."""
    context = NgramCache()
    n_drafted = n_accept = 0
    t_draft = 0.0
    n_input = len(tokens)
    for i_start in range(0, max(n_input - n_ctx, 0), n_ctx):
        chunk = tokens[i_start:i_start + n_ctx]
        out = [chunk[0]]
        while len(out) < n_ctx:
            t0 = time.perf_counter()
            draft = cache_draft(out, n_draft, context, dynamic, static, ties)
            t_draft += time.perf_counter() - t0
            n_drafted += len(draft)
            for token in draft:
                if len(out) >= n_ctx or chunk[len(out)] != token:
                    break
                n_accept += 1
                out.append(token)
                t0 = time.perf_counter()
                context.update(out, NGRAM_MIN, NGRAM_MAX, 1)
                t_draft += time.perf_counter() - t0
            if len(out) < n_ctx:          # the "sampled" token: the text's own next token
                out.append(chunk[len(out)])
                t0 = time.perf_counter()
                context.update(out, NGRAM_MIN, NGRAM_MAX, 1)
                t_draft += time.perf_counter() - t0
        dynamic.merge(context)
        context.clear()
    return {"n_draft": n_draft, "n_predict": n_input - n_input % n_ctx, "n_drafted": n_drafted,
            "n_accept": n_accept, "t_draft_us": t_draft * 1e6}


def stats_lines(result: dict, t_draft_flat_us: float) -> list[str]:
    """llama-lookup-stats' summary block."""
    drafted, t_us = result["n_drafted"], result["t_draft_us"]
    us_per_token = t_us / drafted if drafted else math.nan
    tokens_per_second = drafted / (1e-6 * t_us) if t_us else math.nan
    accept = 100.0 * result["n_accept"] / drafted if drafted else math.nan
    return [
        f"n_draft      = {result['n_draft']}",
        f"n_predict    = {result['n_predict']}",
        f"n_drafted    = {drafted}",
        f"t_draft_flat = {t_draft_flat_us * 1e-3:.2f} ms",
        f"t_draft      = {t_us * 1e-3:.2f} ms, {us_per_token:.2f} us per token, "
        f"{tokens_per_second:.2f} tokens per second",
        f"n_accept     = {result['n_accept']}",
        f"accept       = {accept:.3f}%",
    ]


def stats(args) -> None:
    if args.ctx_size < 2:
        raise OptionError(f"--ctx-size must be >= 2 (got {args.ctx_size})")
    if args.draft_max < 1:
        raise OptionError(f"--spec-draft-n-max must be >= 1 (got {args.draft_max})")
    t0 = time.perf_counter()
    static = NgramCache.load(args.lookup_cache_static, "static lookup cache") \
        if args.lookup_cache_static else NgramCache()
    dynamic_path = args.lookup_cache_dynamic
    dynamic = NgramCache.load(dynamic_path, "dynamic lookup cache") \
        if dynamic_path and Path(dynamic_path).is_file() else NgramCache()
    t_flat_us = (time.perf_counter() - t0) * 1e6
    tokens = _tokens(args)
    if len(tokens) <= args.ctx_size:
        raise OptionError(f"the text has {len(tokens)} tokens; the simulation runs over whole chunks of "
                          f"--ctx-size {args.ctx_size} tokens and needs more than one chunk's worth")
    result = simulate(tokens, args.ctx_size, args.draft_max, dynamic, static)
    print()
    for line in stats_lines(result, t_flat_us):
        print(line)


def run(args) -> int:
    {"create": create, "merge": merge, "stats": stats}[args.lookup_command](args)
    return 0
