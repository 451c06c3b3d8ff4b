"""Model folders shipped inside the package: the bundled model and the drafters trained for it."""
from pathlib import Path

BUNDLED_DIR = Path(__file__).resolve().parent
STDLIB_CODER = BUNDLED_DIR / "stdlib-coder"

# spec type -> (drafter folder for stdlib-coder, the --spec-draft-n-max it is served with: measured best;
# the block drafters were trained on blocks of 8 but pay most with 6, docs/training.md)
STDLIB_CODER_DRAFTERS = {
    "draft-simple": (BUNDLED_DIR / "stdlib-coder-draft", 3),
    "draft-eagle3": (BUNDLED_DIR / "stdlib-coder-eagle3", 3),
    "draft-mtp": (BUNDLED_DIR / "stdlib-coder-mtp", 3),
    "draft-dflash": (BUNDLED_DIR / "stdlib-coder-dflash", 6),
    "draft-dspark": (BUNDLED_DIR / "stdlib-coder-dspark", 6),
}


# spec type -> the --quant-draft it is served with. int8 halves the bytes each one-row step of a draft
# chain streams (draft-simple, EAGLE-3, MTP: their draft call got about twice as fast); the block
# drafters' multi-row drafts run as fast or faster in bfloat16 (docs/speed.md). The target verifies
# every draft, so the output is the same either way.
STDLIB_CODER_DRAFT_QUANT = {"draft-simple": "int8", "draft-eagle3": "int8", "draft-mtp": "int8"}


def served_options(spec_type: str) -> dict:
    """The options a shipped drafter is served with: its draft length and, where it pays, int8 weights."""
    options = {"spec_draft_n_max": STDLIB_CODER_DRAFTERS[spec_type][1]}
    if spec_type in STDLIB_CODER_DRAFT_QUANT:
        options["quant_draft"] = STDLIB_CODER_DRAFT_QUANT[spec_type]
    return options


def shipped_drafters() -> dict[str, tuple[Path, int]]:
    """The drafters of STDLIB_CODER_DRAFTERS present in this installation."""
    return {t: v for t, v in STDLIB_CODER_DRAFTERS.items() if (v[0] / "config.json").is_file()}
