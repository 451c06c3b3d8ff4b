"""A target's tokens ranked by how often they occur: the file `--spec-draft-vocab N` takes its N tokens from.

A chain drafter's step is one decoder layer plus its lm_head over the whole vocabulary; on a small
target the lm_head is the larger part. Cutting it to the most frequent tokens (FR-Spec, Zhao et al.
2025, arXiv:2502.14856) makes each step cheaper and loses only the drafts of rare tokens, which the
target verifies anyway (speculative/draft_vocab.py). Counts come from the target-regenerated
continuations of a `regen_data` file (what drafts must predict), or else from the training split of the
bundled corpus (the text the target learnt); ties go to the lower id, so the same input gives the same
file.

    python -m specserve.train.token_ranking --target specserve/bundled/stdlib-coder \
        --out specserve/bundled/stdlib-coder/token_ranking.json [--data runs/regen.npz]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

RANKING_FORMAT = "specserve-token-ranking"
RANKING_FILE = "token_ranking.json"     # looked for in the draft folder, then the target's


def token_counts(token_arrays, vocab: int) -> np.ndarray:
    """How often each id in [0, vocab) occurs in the arrays."""
    counts = np.zeros(vocab, dtype=np.int64)
    for tokens in token_arrays:
        counts += np.bincount(np.asarray(tokens, dtype=np.int64), minlength=vocab)[:vocab]
    return counts


def ranked_ids(counts: np.ndarray) -> np.ndarray:
    """Every id, most frequent first (ties by id)."""
    return np.lexsort((np.arange(len(counts)), -counts))


def regenerated_counts(samples, vocab: int) -> np.ndarray:
    """Counts over the target-regenerated part of RegenSamples (not their prompts)."""
    return token_counts((s.tokens[s.n_prompt:] for s in samples), vocab)


def corpus_counts(tokenizer_path: Path, vocab: int) -> np.ndarray:
    """Counts over the training split of the corpus the bundled model learnt (train/corpus.py)."""
    from tokenizers import Tokenizer

    from .corpus import encode_files, list_files, split_files, stdlib_root
    train_files, _ = split_files(list_files())
    return token_counts([encode_files(Tokenizer.from_file(str(tokenizer_path)), stdlib_root(), train_files)], vocab)


def write_ranking(path: Path, counts: np.ndarray, source: str) -> None:
    order = ranked_ids(counts)
    path.write_text(json.dumps({"format": RANKING_FORMAT, "vocab_size": len(counts), "source": source,
                                "token_ids": order.tolist(), "counts": counts[order].tolist()}) + "\n")


def main(argv=None) -> int:
    from ..errors import SpecServeError
    from ..models.config import load_config
    from .regen_data import load_regen_dataset

    parser = argparse.ArgumentParser(prog="python -m specserve.train.token_ranking", description=__doc__.split("\n")[0])
    parser.add_argument("--target", required=True, help="the target model folder (its vocabulary and tokenizer)")
    parser.add_argument("--out", required=True, help="the ranking file to write (JSON)")
    parser.add_argument("--data", default="", help="a regen_data .npz file: count its regenerated continuations "
                                                   "(default: the training split of the bundled corpus)")
    args = parser.parse_args(argv)
    target = Path(args.target)
    try:
        vocab = load_config(target).vocab_size
        if args.data:
            counts, source = regenerated_counts(load_regen_dataset(args.data), vocab), f"regenerated text of {args.data}"
        else:
            counts, source = corpus_counts(target / "tokenizer.json", vocab), "training split of the stdlib corpus"
        write_ranking(Path(args.out), counts, source)
    except (SpecServeError, OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    top = counts[ranked_ids(counts)]
    cover = [top[:n].sum() / max(top.sum(), 1) for n in (1024, 2048)]
    print(f"wrote {args.out}: {vocab} tokens ranked by {source}; the top 1024 / 2048 cover {cover[0]:.3f} / "
          f"{cover[1]:.3f} of its {top.sum()} tokens")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
