"""Byte-level BPE for the bundled model, trained with the `tokenizers` library.

Byte-level pre-tokenisation and decoding map every UTF-8 string to tokens and back
exactly; the vocabulary counts the two special tokens:
  id 0 `<|endoftext|>`: end of text and document separator;
  id 1 `<|mask|>`: reserved for block-diffusion drafters, never in the training data.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

from .corpus import EOS_TOKEN, MASK_TOKEN

SPECIAL_TOKENS = (EOS_TOKEN, MASK_TOKEN)

# Code-completion rendering of a conversation; see the model card for the rules.
CHAT_TEMPLATE = (
    "{%- set ns = namespace(prev='') -%}"
    "{%- for message in messages -%}"
    "{%- set content = message['content'] if message['content'] is string else '' -%}"
    "{%- if message['role'] == 'system' -%}"
    "{%- set lines = content.split('\\n') -%}"
    "{%- if content.endswith('\\n') -%}{%- set lines = lines[:-1] -%}{%- endif -%}"
    "{%- set ns.text = '' -%}"
    "{%- for line in lines -%}{%- set ns.text = ns.text ~ '# ' ~ line ~ '\\n' -%}{%- endfor -%}"
    "{%- set text = ns.text -%}"
    "{%- else -%}"
    "{%- set text = content -%}"
    "{%- endif -%}"
    "{%- if not loop.first and not ns.prev.endswith('\\n') -%}{{ '\\n' }}{%- endif -%}"
    "{{ text }}"
    "{%- set ns.prev = text -%}"
    "{%- endfor -%}"
)


def train_tokenizer(texts: Iterable[str], vocab_size: int = 4096, min_frequency: int = 2) -> Tokenizer:
    """Train on `texts` (train split only). vocab_size includes the special tokens."""
    tokenizer = Tokenizer(models.BPE())
    # No prefix space: the text is code, and round-tripping must be exact.
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=[AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    for index, token in enumerate(SPECIAL_TOKENS):
        if tokenizer.token_to_id(token) != index:
            raise RuntimeError(f"special token {token!r} did not get id {index}")
    return tokenizer


def tokenizer_config(tokenizer: Tokenizer, model_max_length: int) -> dict:
    """transformers-style tokenizer_config.json for a PreTrainedTokenizerFast."""
    added = {}
    for token in SPECIAL_TOKENS:
        added[str(tokenizer.token_to_id(token))] = {
            "content": token, "lstrip": False, "normalized": False, "rstrip": False,
            "single_word": False, "special": True,
        }
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "added_tokens_decoder": added,
        "bos_token": None,
        "eos_token": EOS_TOKEN,
        "pad_token": EOS_TOKEN,
        "mask_token": MASK_TOKEN,
        "unk_token": None,
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,   # any cleanup would break exact round-trips
        "model_max_length": model_max_length,
        "padding_side": "left",
        "chat_template": CHAT_TEMPLATE,
    }


def save_tokenizer(tokenizer: Tokenizer, out_dir: str | Path, model_max_length: int) -> None:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(out_dir / "tokenizer.json"))
    config = tokenizer_config(tokenizer, model_max_length)
    (out_dir / "tokenizer_config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n",
                                                   encoding="utf-8")
