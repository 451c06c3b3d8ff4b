"""Model folders shipped inside the package: the bundled model and the drafters trained for it."""
from pathlib import Path

from .. import kernels

BUNDLED_DIR = Path(__file__).resolve().parent
STDLIB_CODER = BUNDLED_DIR / "stdlib-coder"

# spec type -> (drafter folder for stdlib-coder, the --spec-draft-n-max it is served with: measured best
# where a verified row costs about a third of a one-row forward, a CPU without AMX; docs/training.md)
STDLIB_CODER_DRAFTERS = {
    "draft-simple": (BUNDLED_DIR / "stdlib-coder-draft", 3),
    "draft-eagle3": (BUNDLED_DIR / "stdlib-coder-eagle3", 3),
    "draft-mtp": (BUNDLED_DIR / "stdlib-coder-mtp", 3),
    "draft-dflash": (BUNDLED_DIR / "stdlib-coder-dflash", 3),
    "draft-dspark": (BUNDLED_DIR / "stdlib-coder-dspark", 3),
}

# on a CPU with AMX, where 16 rows cost what one does, longer drafts pay at T=0 and short ones at T > 0,
# where fewer drafts are accepted (measured with q8 drafts, docs/training.md "On a Xeon with AMX"):
# spec type -> (--spec-draft-n-max, --spec-draft-n-max-sampled)
AMX_N_MAX = {"draft-simple": (6, 2), "draft-eagle3": (8, 2), "draft-mtp": (10, 3), "draft-dflash": (6, 2),
             "draft-dspark": (8, 3)}
# without AMX a verified row is real work (AVX2: the second row costs about a quarter of a one-row
# forward, each further one half; AVX-512: a fifth each), and sampled requests, whose drafts are accepted
# less often, are not drafted for (they run at parity; docs/model-drafters.md), but by MTP on AVX-512, the
# one drafter measured to pay for them there (T=1, 1 slot, q8 drafts sampled from the request's sampler,
# interleaved: MTP at 3 drafts 1.06-1.10x, draft-simple 0.98-1.00x, EAGLE-3 at 2 0.95x, DSpark 0.80x; on
# AVX2 MTP lost, 0.67-0.71x, with llama.cpp's top-10 q)
NO_AMX_N_MAX_SAMPLED = 0
AVX512_N_MAX_SAMPLED = {"draft-mtp": 3}
# the chains draft for sampled requests with drafts sampled from the request's sampler (--spec-draft-sample),
# which are accepted far more often than greedy drafts verified one-hot
CHAIN_DRAFTERS = ("draft-simple", "draft-eagle3", "draft-mtp")
# there a draft's lm_head over the whole 4096-token vocabulary is a large part of a draft call: the
# drafters draft among the 2048 most frequent tokens (--spec-draft-vocab, ranked in the target folder's
# token_ranking.json). T=0, 1 slot, interleaved, over no speculation: AVX-512 without AMX (two or three
# runs) MTP 1.36x -> 1.38-1.47x, draft-simple 1.15-1.22x -> 1.23-1.27x, DSpark 1.08-1.17x ->
# 1.22-1.24x, DFlash 1.09-1.11x -> 1.16-1.18x; AVX2 MTP 0.95-1.11x -> 1.02-1.20x, draft-simple up 1-4 %,
# the block drafters within the noise. EAGLE-3 already drafts among 2048 (docs/model-drafters.md)
NO_AMX_DRAFT_VOCAB = {"draft-simple": 2048, "draft-mtp": 2048, "draft-dflash": 2048, "draft-dspark": 2048}
# without int8 dot products the chains take int8 weights, which halve the bytes each of their one-row
# steps streams, and the block drafters bfloat16
NO_INT8_DOT_QUANT = {"draft-simple": "int8", "draft-eagle3": "int8", "draft-mtp": "int8"}


def _rows_nearly_free() -> bool:
    """AMX on the native kernels: 16 rows of a product cost about what one does."""
    return kernels.mode() == "native" and kernels.has_amx()


def _rows_cost() -> bool:
    """The native kernels without AMX: each verified row is real work."""
    return kernels.mode() == "native" and not kernels.has_amx()


def served_quant(spec_type: str) -> str | None:
    """The --quant-draft a shipped drafter is served with on this CPU (None: bfloat16, or not a drafter):
    q8 (int8 weights and rows, integer dot products) where the CPU has int8 dot products (AVX-512 VNNI,
    or AVX2's vpmaddubsw), measured the cheapest draft for every drafter with and without AMX; else as
    NO_INT8_DOT_QUANT. The target verifies every draft, so the output is the same either way."""
    if spec_type not in STDLIB_CODER_DRAFTERS:
        return None
    if kernels.mode() == "native" and kernels.has_int8_dot():
        return "q8"
    return NO_INT8_DOT_QUANT.get(spec_type)


def served_n_max(spec_type: str, sampled: bool = False) -> int:
    """The --spec-draft-n-max a shipped drafter is served with on this CPU (sampled: its
    --spec-draft-n-max-sampled, for requests at T > 0)."""
    if _rows_nearly_free():
        return AMX_N_MAX[spec_type][1 if sampled else 0]
    if sampled and _rows_cost():
        return AVX512_N_MAX_SAMPLED.get(spec_type, NO_AMX_N_MAX_SAMPLED) if kernels.has_bf16_dot() \
            else NO_AMX_N_MAX_SAMPLED
    return STDLIB_CODER_DRAFTERS[spec_type][1]


def served_options(spec_type: str) -> dict:
    """The options a shipped drafter is served with on this CPU: its draft lengths, its weights, whether its
    drafts for sampled requests are sampled and, where measured to pay, its draft vocabulary."""
    options = {"spec_draft_n_max": served_n_max(spec_type)}
    n_sampled = served_n_max(spec_type, sampled=True)
    if n_sampled != options["spec_draft_n_max"]:
        options["spec_draft_n_max_sampled"] = n_sampled
    if spec_type in CHAIN_DRAFTERS and n_sampled > 0:
        options["spec_draft_sample"] = True
    quant = served_quant(spec_type)
    if quant:
        options["quant_draft"] = quant
    if spec_type in NO_AMX_DRAFT_VOCAB and _rows_cost():
        options["spec_draft_vocab"] = NO_AMX_DRAFT_VOCAB[spec_type]
    return options


def shipped_drafters() -> dict[str, tuple[Path, int]]:
    """The drafters of STDLIB_CODER_DRAFTERS present in this installation."""
    return {t: v for t, v in STDLIB_CODER_DRAFTERS.items() if (v[0] / "config.json").is_file()}
