"""llama.cpp's check that a draft model can speculate for a target (`common_speculative_are_compatible`).

The vocabulary types must match; BOS (and EOS) must agree when they are added to prompts;
the vocabulary sizes may differ by at most 128 (padding rows); and every token text from
id 5 on must be identical (the first few ids are often differently named control tokens).
"""
from __future__ import annotations

from pathlib import Path

from ..errors import IncompatibleDraftError
from ..models.tokenizer import Tokenizer, load_tokenizer

MAX_SIZE_DIFFERENCE = 128
CHECK_START_TOKEN_ID = 5


def vocab_type(tok: Tokenizer) -> str:
    return type(tok.tok.model).__name__        # BPE, Unigram, WordPiece, WordLevel


def _adds(tok: Tokenizer, key: str) -> bool:
    return bool(tok.config.get(key, False))


def check_vocab_compatible(target_tok: Tokenizer | None, target_vocab: int, draft_dir: str | Path,
                           draft_vocab: int) -> None:
    """Raise IncompatibleDraftError naming the first difference; sizes are the models' vocab_size."""
    draft_dir = Path(draft_dir)
    where = f"draft model {draft_dir}"
    if abs(target_vocab - draft_vocab) > MAX_SIZE_DIFFERENCE:
        raise IncompatibleDraftError(
            f"{where}: vocabulary size {draft_vocab} differs from the target's {target_vocab} by "
            f"{abs(target_vocab - draft_vocab)} (at most {MAX_SIZE_DIFFERENCE} allowed)")
    if target_tok is None:
        return                      # a token-id-only target: nothing more can be compared
    draft_tok = load_tokenizer(draft_dir)
    if draft_tok is None:
        raise IncompatibleDraftError(f"{where} has no tokenizer.json (nor GGUF tokenizer metadata), so its "
                                     "vocabulary cannot be checked against the target's")
    if vocab_type(target_tok) != vocab_type(draft_tok):
        raise IncompatibleDraftError(f"{where}: vocabulary type {vocab_type(draft_tok)} differs from the "
                                     f"target's {vocab_type(target_tok)}")
    for flag, name, t_id, d_id in (("add_bos_token", "BOS", target_tok.bos_token_id, draft_tok.bos_token_id),
                                   ("add_eos_token", "EOS", target_tok.eos_token_id, draft_tok.eos_token_id)):
        t_adds, d_adds = _adds(target_tok, flag), _adds(draft_tok, flag)
        if t_adds != d_adds:
            raise IncompatibleDraftError(f"{where}: {flag} is {d_adds} but the target's is {t_adds}")
        if t_adds and t_id != d_id:
            raise IncompatibleDraftError(f"{where}: {name} token id {d_id} differs from the target's {t_id}")
    n = min(target_tok.vocab_size, draft_tok.vocab_size, target_vocab, draft_vocab)
    for token_id in range(CHECK_START_TOKEN_ID, n):
        t_text, d_text = target_tok.id_to_token(token_id), draft_tok.id_to_token(token_id)
        if t_text != d_text:
            raise IncompatibleDraftError(
                f"{where}: token {token_id} is {d_text!r} in the draft but {t_text!r} in the target; "
                "the draft must use the target's vocabulary")
