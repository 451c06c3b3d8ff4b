"""`specserve demo`: the same code-editing prompt without and with speculation, side by side."""
from __future__ import annotations

import argparse

from ..engine.request import Request
from ..bundled import shipped_drafters
from ..llm import load_engine
from ..sampling import SamplingParams
from .generate import timing_lines

# The model is asked to write out a function it has just seen with one name changed:
# the kind of edit where copying from the context (n-gram drafting) shines.
DEMO_PROMPT = '''def merge_sorted(left, right):
    """Merge two sorted lists into one sorted list."""
    result = []
    i = j = 0
    while i < len(left) and j < len(right):
        if left[i] <= right[j]:
            result.append(left[i])
            i += 1
        else:
            result.append(right[j])
            j += 1
    result.extend(left[i:])
    result.extend(right[j:])
    return result


def merge_sorted_lists(left, right):
    """Merge two sorted lists into one sorted list."""
    result = []
'''


def default_spec_types() -> str:
    return ",".join(["ngram-simple", *shipped_drafters()])


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-m", "--model", default=None, help="model folder (default: the bundled model)")
    parser.add_argument("-n", "--n-predict", type=int, default=160, help="tokens to generate")
    parser.add_argument("--spec-type", default=None,
                        help="speculative types to compare with the baseline (comma list, each run separately; "
                             f"default: {default_spec_types()})")
    parser.add_argument("-md", "--spec-draft-model", default=None,
                        help="draft model folder for draft-* types (default: the bundled drafters)")
    parser.add_argument("-p", "--prompt", default=DEMO_PROMPT, help="prompt (default: a code-editing prompt)")


def _run_once(model, spec_type, draft_model, prompt, n_predict, extra):
    engine, tokenizer = load_engine(model, draft_model, spec_type, **extra)
    params = SamplingParams(temperature=0, max_tokens=n_predict, ignore_eos=True)
    engine.add_request(Request("warmup", tokenizer.encode(prompt)[:16], SamplingParams(temperature=0, max_tokens=4)))
    while engine.has_work():
        engine.step()
    request = Request("demo", tokenizer.encode(prompt), params)
    engine.add_request(request)
    while not request.finished:
        engine.step()
    return engine, request


def run(args) -> int:
    spec_types = args.spec_type or default_spec_types()
    runs = ["none"] + [t.strip() for t in spec_types.split(",") if t.strip() and t.strip() != "none"]
    # small n-grams suit a short demo prompt; llama.cpp's defaults (12/48) need long histories
    extra = {"spec_ngram_simple_size_n": 4, "spec_ngram_simple_size_m": 32}
    base_text, base_speed = None, None
    print(f"prompt ({len(args.prompt)} chars), greedy, {args.n_predict} tokens\n")
    for spec_type in runs:
        draft_model, run_extra = args.spec_draft_model, dict(extra)
        if spec_type in shipped_drafters() and draft_model is None and args.model is None:
            draft_model, run_extra["spec_draft_n_max"] = shipped_drafters()[spec_type]
        engine, req = _run_once(args.model, spec_type, draft_model, args.prompt, args.n_predict, run_extra)
        out = req.snapshot()
        speed = out.timings["predicted_per_second"]
        if base_text is None:
            base_text, base_speed = out.text, speed
            print("--- generated text " + "-" * 50)
            print(out.text)
            print("-" * 68)
        label = "baseline (no speculation)" if spec_type == "none" else spec_type
        line = f"{label:<28} {speed:8.1f} tokens/s"
        if spec_type != "none":
            same = "yes" if out.text == base_text else "NO"
            line += f"   speedup {speed / base_speed:5.2f}x   output identical to baseline: {same}"
        print(line)
        for stat in timing_lines(out.timings)[1:2] + engine.request_stats_lines(req) + engine.driver_stats_lines():
            print("    " + stat)
    return 0
