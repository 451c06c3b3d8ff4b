"""The options every model drafter reads (draft-simple, -eagle3, -mtp, -dflash, -dspark), with llama.cpp's
names and defaults (common/arg.cpp: --spec-draft-n-max 3 as in `common_params_speculative`)."""
from __future__ import annotations

from types import SimpleNamespace

from ..errors import OptionError
from ..kernels.packed import check_quant
from ..option import Option, read_options

DRAFT_OPTIONS = [
    Option(("--spec-draft-n-max",), "spec_draft_n_max", int, 3, "most tokens to draft per step (draft-* types)"),
    Option(("--spec-draft-n-max-sampled",), "spec_draft_n_max_sampled", int, -1,
           "most tokens to draft per step for requests sampled at temperature > 0, whose drafts are accepted "
           "less often (draft-* types; -1: --spec-draft-n-max; 0: sampled requests are not drafted for)"),
    Option(("--spec-draft-n-min",), "spec_draft_n_min", int, 0, "discard drafts shorter than this (draft-* types)"),
    Option(("--spec-draft-p-min", "--draft-p-min"), "spec_draft_p_min", float, 0.0,
           "stop drafting below this probability / predicted acceptance (draft-* types)"),
    Option(("--spec-draft-sample",), "spec_draft_sample", bool, False,
           "draft-simple/eagle3/mtp at temperature > 0: sample drafts from the request's own sampler (top-k, "
           "top-p, min-p, temperature) over the draft's logits and verify by rejection sampling with that "
           "distribution (default: greedy drafts, verified one-hot as in llama.cpp)"),
    Option(("--quant-draft",), "quant_draft", str, "none",
           "weight quantization of the draft model or head: none, int8 or q8 (as --quant; native kernels only); "
           "drafts are verified by the target, so output does not change"),
    Option(("--spec-draft-vocab",), "spec_draft_vocab", int, 0,
           "draft-* types: draft only among the target's N most frequent tokens, the drafter's lm_head cut to "
           "them (cheaper draft steps; output unchanged; 0: every token)"),
    Option(("--spec-draft-token-ranking",), "spec_draft_token_ranking", str, "",
           "the token ranking --spec-draft-vocab takes its tokens from (default: token_ranking.json in the draft "
           "folder, else in the target folder)"),
]


def draft_settings(values: dict) -> SimpleNamespace:
    """n_max, n_max_sampled, n_min, p_min, sample, quant_draft, vocab and token_ranking, checked."""
    s = read_options(DRAFT_OPTIONS, values, prefix="spec_draft_")
    if s.n_max < 1:
        raise OptionError(f"--spec-draft-n-max must be >= 1, got {s.n_max}")
    if not -1 <= s.n_max_sampled <= s.n_max:
        raise OptionError(f"--spec-draft-n-max-sampled must be between 0 (no drafts for sampled requests) and "
                          f"--spec-draft-n-max ({s.n_max}), or -1 for the same, got {s.n_max_sampled}")
    if s.n_max_sampled < 0:
        s.n_max_sampled = s.n_max
    if s.n_min < 0:
        raise OptionError(f"--spec-draft-n-min must be >= 0, got {s.n_min}")
    if not 0.0 <= s.p_min <= 1.0:
        raise OptionError(f"--spec-draft-p-min must be in [0, 1], got {s.p_min}")
    s.quant_draft = check_quant(s.quant_draft, "--quant-draft")
    if s.vocab < 0:
        raise OptionError(f"--spec-draft-vocab must be >= 0, got {s.vocab}")
    if s.token_ranking and not s.vocab:
        raise OptionError("--spec-draft-token-ranking needs --spec-draft-vocab N (how many of its tokens to keep)")
    return s

