"""The speculative-decoding options every command shares (the methods' own options are declared in
their modules), and their defaults as one dict for the Python API."""
from __future__ import annotations

from ..option import Option
from .draft_options import DRAFT_OPTIONS
from .registry import all_options, available_types

SPEC_OPTIONS = [
    Option(("--spec-type",), "spec_type", str, "none",
           "comma-separated speculative types: " + ", ".join(available_types()) + " ('none' disables)"),
    Option(("--spec-default",), "spec_default", bool, False,
           "when --spec-type is none or not given, use ngram-mod (n-match 24, n-min 48, n-max 64)"),
    Option(("-md", "--spec-draft-model", "--model-draft"), "spec_draft_model", str, None,
           "draft model folder or GGUF file for the draft-* types (draft-mtp: folders only)",
           env="LLAMA_ARG_SPEC_DRAFT_MODEL"),
    *DRAFT_OPTIONS,
    Option(("--spec-ngram-greedy-only",), "spec_ngram_greedy_only", bool, False,
           "the ngram-* types draft for greedy requests only (T=0): at temperature > 0 their drafts are "
           "accepted only where the target's sample matches them, and their long drafts cost verified rows"),
    Option(("--spec-schedule",), "spec_schedule", bool, False,
           "every type: verify only the drafts that pay off across the batch, from each slot's acceptance "
           "history and the target's profiled steps-per-second curve (DSpark's Algorithm 1 generalised)"),
    Option(("--spec-schedule-cost-table",), "spec_schedule_cost_table", str, None,
           "JSON step-cost table {\"rows\": [...], \"seconds\": [...]} for --spec-schedule "
           "(default: profile the target at start-up)"),
]


def default_spec_options() -> dict:
    """Every speculative option's default by dest name (what LLM starts from)."""
    return {o.dest: o.default for o in SPEC_OPTIONS + all_options()}
