"""Model folders shipped inside the package: the bundled model and the drafters trained for it."""
from pathlib import Path

from .. import kernels

BUNDLED_DIR = Path(__file__).resolve().parent
STDLIB_CODER = BUNDLED_DIR / "stdlib-coder"

# spec type -> (drafter folder for stdlib-coder, the --spec-draft-n-max it is served with: measured best;
# the block drafters were trained on blocks of 8, but on a CPU without AMX every verified row costs
# about a third of a one-row forward, and 3 paid best there, within 10 % of 6 on one with AMX
# (docs/training.md)
STDLIB_CODER_DRAFTERS = {
    "draft-simple": (BUNDLED_DIR / "stdlib-coder-draft", 3),
    "draft-eagle3": (BUNDLED_DIR / "stdlib-coder-eagle3", 3),
    "draft-mtp": (BUNDLED_DIR / "stdlib-coder-mtp", 3),
    "draft-dflash": (BUNDLED_DIR / "stdlib-coder-dflash", 3),
    "draft-dspark": (BUNDLED_DIR / "stdlib-coder-dspark", 3),
}


# spec type -> the --quant-draft it is served with where the CPU has no int8 dot products: int8 weights
# halve the bytes each one-row step of a draft chain streams (draft-simple, EAGLE-3, MTP); the block
# drafters' multi-row drafts run as fast or faster in bfloat16 there (docs/speed.md). Where it has
# them (AVX-512 VNNI), every drafter is served q8 (int8 weights and rows, integer dot products), the
# cheapest draft on both kinds of call. The target verifies every draft, so the output is the same
# either way.
STDLIB_CODER_DRAFT_QUANT = {"draft-simple": "int8", "draft-eagle3": "int8", "draft-mtp": "int8"}


def served_quant(spec_type: str) -> str | None:
    """The --quant-draft a shipped drafter is served with on this CPU (None: bfloat16, or not a drafter)."""
    if spec_type not in STDLIB_CODER_DRAFTERS:
        return None
    if kernels.mode() == "native" and kernels.has_int8_dot():
        return "q8"
    return STDLIB_CODER_DRAFT_QUANT.get(spec_type)


def served_options(spec_type: str) -> dict:
    """The options a shipped drafter is served with: its draft length and its weights (served_quant)."""
    options = {"spec_draft_n_max": STDLIB_CODER_DRAFTERS[spec_type][1]}
    quant = served_quant(spec_type)
    if quant:
        options["quant_draft"] = quant
    return options


def shipped_drafters() -> dict[str, tuple[Path, int]]:
    """The drafters of STDLIB_CODER_DRAFTERS present in this installation."""
    return {t: v for t, v in STDLIB_CODER_DRAFTERS.items() if (v[0] / "config.json").is_file()}
