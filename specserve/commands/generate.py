"""`specserve generate`: one prompt through the engine, printed like llama.cpp does."""
from __future__ import annotations

import argparse
import json
import re
import sys

from ..engine.request import Request, timing_lines
from ..errors import OptionError
from ..llm import load_engine
from ..options import add_engine_options, spec_option_values
from ..sampling import WHOLE_HISTORY, SamplingParams
from .prompt_text import add_text_options, text_from_args


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_text_options(parser, "prompt")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object (text, token_ids, finish_reason, timings, spec) at the end, "
                             "instead of the text as it is generated")
    add_engine_options(parser)


def engine_from_args(args, n_parallel: int | None = None):
    spec = spec_option_values(args)
    spec_type = spec.pop("spec_type")
    draft_model = spec.pop("spec_draft_model")
    return load_engine(args.model, draft_model, spec_type, n_parallel=n_parallel or args.parallel,
                       ctx_size=args.ctx_size, n_batch=args.batch_size, dtype=args.dtype, threads=args.threads,
                       kernels=args.kernels, quant=args.quant, cache_type_k=args.cache_type_k,
                       cache_type_v=args.cache_type_v, slot_prompt_similarity=args.slot_prompt_similarity, **spec)


def sampling_from_args(args) -> SamplingParams:
    return SamplingParams(max_tokens=None if args.n_predict < 0 else args.n_predict, temperature=args.temp,
                          top_k=args.top_k, top_p=args.top_p, min_p=args.min_p,
                          seed=None if args.seed < 0 else args.seed, ignore_eos=args.ignore_eos,
                          repetition_penalty=args.repeat_penalty, presence_penalty=args.presence_penalty,
                          frequency_penalty=args.frequency_penalty,
                          penalty_last_n=WHOLE_HISTORY if args.repeat_last_n == -1 else args.repeat_last_n,
                          logit_bias=parse_logit_bias_option(args.logit_bias))


def parse_logit_bias_option(text: str | None) -> dict[int, float]:
    """llama.cpp's -l syntax, comma separated: 15043+1,2-inf."""
    out = {}
    for item in (text or "").split(","):
        item = item.strip()
        if not item:
            continue
        match = re.fullmatch(r"(\d+)([+-])(inf|\d+(?:\.\d*)?|\.\d+)", item)
        if not match:
            raise OptionError(f"--logit-bias: expected TOKEN_ID+BIAS or TOKEN_ID-BIAS, got {item!r}")
        token, sign, value = match.groups()
        out[int(token)] = float(value) * (1 if sign == "+" else -1)
    return out


def run(args) -> int:
    prompt = text_from_args(args)
    engine, tokenizer = engine_from_args(args, n_parallel=1)
    if tokenizer is None:
        raise OptionError(f"no tokenizer.json in the model folder {args.model}")
    request = Request("cli", tokenizer.encode(prompt), sampling_from_args(args))
    if not args.json:          # as llama-completion does: the prompt, then the text as it is accepted
        sys.stdout.write(prompt)
        sys.stdout.flush()
        request.on_update = lambda update: (sys.stdout.write(update.new_text), sys.stdout.flush())
    engine.add_request(request)
    while not request.finished:
        engine.step()
    out = request.snapshot()
    if args.json:
        print(json.dumps({
            "text": out.text, "token_ids": out.token_ids, "finish_reason": out.finish_reason,
            "timings": out.timings, "spec": out.draft_stats, "spec_statistics": engine.driver.stats_dict(),
            "error": out.error}))
    else:
        print(out.new_text)    # whatever the last update still held back (a partial stop string that was not)
        for line in timing_lines(out.timings) + engine.request_stats_lines(request) + engine.driver_stats_lines():
            print(line, file=sys.stderr)
    return 1 if out.finish_reason == "error" else 0
