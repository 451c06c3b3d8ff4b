"""`specserve demo`: the same code-editing prompt without and with speculation, side by side, and the
same methods over a spread of the bundled `qualitative` prompt set (one prompt says little: a drafter's
speedup varies several-fold from prompt to prompt)."""
from __future__ import annotations

import argparse
from pathlib import Path

from ..bench.samples import load_bundled
from ..engine.request import Request
from ..bundled import served_options, shipped_drafters
from ..llm import load_engine
from ..sampling import SamplingParams
from ..speculative.draft_options import draft_settings
from ..speculative.registry import available_types, draftless_types, model_drafter_type, proposer_class
from ..engine.request import timing_lines

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


SET_NAME = "qualitative"      # every SET_EVERY-th prompt of it: code, edits, maths, summaries, questions, prose
SET_EVERY = 7

# small n-grams suit a short demo prompt; llama.cpp's defaults (12/48) need long histories
NGRAM_SETTINGS = {"spec_ngram_simple_size_n": 4, "spec_ngram_simple_size_m": 32}
TOY_NOTE = ("The bundled model is a toy: a 5.8M-parameter Qwen3-architecture model trained for minutes on the "
            "Python standard library. It writes Python-looking text, not working programs; it is here to show "
            "speed and losslessness, not quality.")


def default_spec_types() -> str:
    """Every type alone, then DSpark behind ngram-mod (A+B: the two together, in llama.cpp's precedence: ngram-mod
    drafts where it finds a long repeat, for greedy requests only, the drafter elsewhere)."""
    drafters = list(shipped_drafters())
    together = ["ngram-mod+draft-dspark"] if "draft-dspark" in drafters else []
    return ",".join(draftless_types() + drafters + together)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-m", "--model", default=None, help="model folder (default: the bundled model)")
    parser.add_argument("-n", "--n-predict", type=int, default=160, help="tokens to generate")
    parser.add_argument("-t", "--threads", type=int, default=1,
                        help="compute threads (default 1: one thread measures reliably on a shared machine; "
                             "0 = every physical core)")
    parser.add_argument("--spec-type", default=None,
                        help="speculative types to compare with the baseline (comma list, each run separately; "
                             "A+B runs A and B together, e.g. ngram-mod+draft-dspark; default: every type, the "
                             "draft-* ones with the bundled drafters, and DSpark behind ngram-mod)")
    parser.add_argument("-md", "--spec-draft-model", default=None,
                        help="draft model folder for draft-* types (default: the bundled drafters)")
    parser.add_argument("-p", "--prompt", default=DEMO_PROMPT, help="prompt (default: a code-editing prompt)")
    parser.add_argument("--set-tokens", type=int, default=128,
                        help=f"tokens per prompt over every {SET_EVERY}th prompt of the bundled {SET_NAME!r} "
                             "set, after the one prompt (0: skip the set)")


def _greedy(engine, request_id: str, prompt_ids: list[int], n_predict: int) -> Request:
    """One greedy request run to the end on the engine, alone."""
    request = Request(request_id, prompt_ids, SamplingParams(temperature=0, max_tokens=n_predict, ignore_eos=True))
    engine.add_request(request)
    while not request.finished:
        engine.step()
    return request


def _run_once(model, spec_type, draft_model, prompt, n_predict, extra):
    engine, tokenizer = load_engine(model, draft_model, spec_type, **extra)
    _greedy(engine, "warmup", tokenizer.encode(prompt)[:16], 4)
    return engine, tokenizer, _greedy(engine, "demo", tokenizer.encode(prompt), n_predict)


def _run_set(engine, tokenizer, prompts: list[str], n_predict: int) -> tuple[float, list[str]]:
    """(decode tokens per second, the texts) over the prompts, one after another on the warmed-up engine."""
    tokens, ms, texts = 0, 0.0, []
    for i, prompt in enumerate(prompts):
        out = _greedy(engine, f"set-{i}", tokenizer.encode(prompt), n_predict).snapshot()
        tokens, ms = tokens + out.timings["predicted_n"], ms + out.timings["predicted_ms"]
        texts.append(out.text)
    return (1000 * tokens / ms if ms else 0.0), texts


def _settings(spec_type: str, draft_model, extra: dict) -> str:
    """What a run uses, in words."""
    if spec_type == "none":
        return "no speculation"
    if "," in spec_type:            # in precedence order; the n-gram types for greedy requests only
        parts = sorted(spec_type.split(","), key=available_types().index)
        return "; then ".join(f"{t} ({_settings(t, draft_model, extra)})" + (
            "" if proposer_class(t).model_drafter else " for greedy requests") for t in parts)
    if proposer_class(spec_type).model_drafter:
        settings = draft_settings(extra)
        quant = f", --quant-draft {settings.quant_draft}" if settings.quant_draft not in (None, "none") else ""
        sampled = "" if settings.n_max_sampled == settings.n_max else \
            f" ({settings.n_max_sampled} at T > 0)" if settings.n_max_sampled else " (no drafts at T > 0)"
        vocab = f", --spec-draft-vocab {settings.vocab}" if settings.vocab else ""
        drawn = ", --spec-draft-sample" if settings.sample and settings.n_max_sampled else ""
        return f"drafter {Path(draft_model).name}, --spec-draft-n-max {settings.n_max}{sampled}{quant}{vocab}{drawn}"
    if spec_type == "ngram-simple":
        return f"--spec-ngram-simple-size-n {NGRAM_SETTINGS['spec_ngram_simple_size_n']}, " \
               f"-size-m {NGRAM_SETTINGS['spec_ngram_simple_size_m']}"
    return "llama.cpp's defaults"


def run(args) -> int:
    requested = args.spec_type or default_spec_types()
    runs = ["none"] + [t.strip() for t in requested.split(",") if t.strip() and t.strip() != "none"]
    if args.model is None:
        print(TOY_NOTE + "\n")
    lines = args.prompt.splitlines()
    print(f"prompt ({len(lines)} lines; greedy, {args.n_predict} tokens, -t {args.threads}, one run each: on a busy "
          f"machine the speedups move by ~10 % between runs):")
    print("\n".join("    " + line for line in lines[-6:]) + "\n")
    set_prompts = [s.turns[0] for s in load_bundled(SET_NAME)][::SET_EVERY] if args.set_tokens > 0 else []
    if set_prompts:
        print(f"then {len(set_prompts)} prompts of the bundled {SET_NAME!r} set, {args.set_tokens} tokens each "
              f"(\"over the set\")\n")
    base_text, base_speed, base_set, base_set_texts = None, None, None, None
    for label in runs:
        spec_type = label.replace("+", ",")
        drafter_type = model_drafter_type(label.split("+"))
        draft_model, run_extra = args.spec_draft_model, dict(NGRAM_SETTINGS, threads=args.threads)
        if "+" in label:
            run_extra["spec_ngram_greedy_only"] = True
        if drafter_type and draft_model is None:
            shipped = shipped_drafters().get(drafter_type) if args.model is None else None
            if shipped is None:
                print(f"{label:<28} skipped: needs a draft model (-md DIR)")
                continue
            draft_model = shipped[0]
            run_extra.update(served_options(drafter_type))
        engine, tokenizer, req = _run_once(args.model, spec_type, draft_model, args.prompt, args.n_predict, run_extra)
        out = req.snapshot()
        speed = out.timings["predicted_per_second"]
        stats = timing_lines(out.timings)[1:2] + engine.request_stats_lines(req) + engine.driver_stats_lines()
        set_speed, set_texts = _run_set(engine, tokenizer, set_prompts, args.set_tokens)
        if base_text is None:
            base_text, base_speed, base_set, base_set_texts = out.text, speed, set_speed, set_texts
            print("--- generated text " + "-" * 50)
            print(out.text)
            print("-" * 68)
        label = "baseline (no speculation)" if spec_type == "none" else label
        line = f"{label:<28} {speed:8.1f} tokens/s"
        if spec_type != "none":
            same = "yes" if out.text == base_text and set_texts == base_set_texts else "NO"
            line += f"   speedup {speed / base_speed:5.2f}x   output identical to baseline: {same}"
            if set_prompts:
                line += f"   over the set {set_speed / base_set:5.2f}x"
        elif set_prompts:
            line += f"   over the set {set_speed:8.1f} tokens/s"
        print(line)
        print(f"    settings: {_settings(spec_type, draft_model, run_extra)}")
        for stat in stats:              # the one prompt's
            print("    " + stat)
    return 0
