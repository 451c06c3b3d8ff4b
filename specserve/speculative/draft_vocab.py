"""`--spec-draft-vocab N`: a model drafter drafts only among the target's N most frequent tokens.

Its lm_head is cut to those rows (FR-Spec, Zhao et al. 2025, arXiv:2502.14856), so each draft step
multiplies by N rows instead of the whole vocabulary (DSpark's Markov bias is cut to the same columns).
Drafts stay target ids (mapped back like EAGLE-3's d2t) and the target verifies every draft, so the
output does not change: a rare token is just never
drafted, and at T > 0 a sampled draft's q is a distribution over the kept tokens, which rejection
sampling accepts losslessly. The ranking is a `token_ranking.json` (written by
`python -m specserve.train.token_ranking`): `--spec-draft-token-ranking FILE`, else the one in the
draft folder, else the one in the target's folder.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch

from ..errors import OptionError
from ..train.token_ranking import RANKING_FILE, RANKING_FORMAT


def draft_vocab_ids(settings, ctx) -> torch.Tensor:
    """The sorted target ids --spec-draft-vocab keeps (draft_settings `settings`, a ProposerContext)."""
    path = ranking_path(settings.token_ranking, ctx.draft_model_dir, getattr(ctx.target, "model_dir", None))
    return kept_token_ids(path, settings.vocab, ctx.target.config.vocab_size)


def ranking_path(ranking: str, draft_dir: str | None, target_dir: Path | None) -> Path:
    """The ranking file: the option's, else the draft folder's, else the target folder's."""
    if ranking:
        path = Path(ranking)
        if not path.is_file():
            raise OptionError(f"--spec-draft-token-ranking: no such file: {ranking}")
        return path
    for folder in (draft_dir, target_dir):
        if folder and (Path(folder) / RANKING_FILE).is_file():
            return Path(folder) / RANKING_FILE
    raise OptionError(f"--spec-draft-vocab needs a token ranking: no {RANKING_FILE} in the draft or target "
                      f"folder; write one with `python -m specserve.train.token_ranking` and pass "
                      f"--spec-draft-token-ranking FILE")


def kept_token_ids(path: Path, n: int, vocab: int) -> torch.Tensor:
    """The first n ids of the ranking at `path`, sorted, checked against a target vocabulary of `vocab`."""
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise OptionError(f"{path}: not a readable token ranking ({e})") from None
    ids = data.get("token_ids") if isinstance(data, dict) else None
    if not isinstance(ids, list) or data.get("format") != RANKING_FORMAT \
            or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise OptionError(f"{path}: not a token ranking (a JSON object with format {RANKING_FORMAT!r} and a "
                          f"list of integer token_ids)")
    if data.get("vocab_size", vocab) != vocab:
        raise OptionError(f"{path}: ranks a vocabulary of {data['vocab_size']} tokens, the target has {vocab}")
    if not 1 <= n <= len(ids):
        raise OptionError(f"--spec-draft-vocab must be between 1 and the {len(ids)} tokens of {path}, got {n}")
    kept = torch.tensor(ids[:n], dtype=torch.int64)
    if int(kept.min()) < 0 or int(kept.max()) >= vocab or len(torch.unique(kept)) != n:
        raise OptionError(f"{path}: token_ids must be distinct ids below the target's vocabulary size {vocab}")
    return torch.sort(kept).values


def cut_rows(row_ids: torch.Tensor, kept: torch.Tensor) -> torch.Tensor:
    """Indices of the lm_head rows (row r drafts target id row_ids[r]) whose token is kept."""
    return torch.nonzero(torch.isin(row_ids, kept)).flatten()
