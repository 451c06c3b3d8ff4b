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


def shipped_drafters() -> dict[str, tuple[Path, int]]:
    """The drafters of STDLIB_CODER_DRAFTERS present in this installation."""
    return {t: v for t, v in STDLIB_CODER_DRAFTERS.items() if (v[0] / "config.json").is_file()}
