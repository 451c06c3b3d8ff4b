"""A byte-level BPE tokenizer in GGUF metadata (`tokenizer.ggml.*`) <-> a `tokenizers` Tokenizer.

GGUF stores the token strings, their types, the merges, the pre-tokenizer's name
(`tokenizer.ggml.pre`), the special token ids, whether BOS / EOS are added, and the chat template.
llama.cpp keeps one regex per pre-tokenizer name (`src/llama-vocab.cpp`); here each supported name
gets the `tokenizers` pre-tokenizer the original Hugging Face tokenizer.json declares:

  gpt-2      ByteLevel with its built-in GPT-2 regex (also the plain byte-level BPEs `tokenizers` trains)
  llama-bpe  Split(Llama 3 regex) + ByteLevel without regex; merges ignored for whole-word tokens
  qwen2      Split(Qwen2 regex) + ByteLevel without regex, after NFC normalization

Token types are llama.cpp's (`gguf.TokenType`): NORMAL, CONTROL (special added tokens),
USER_DEFINED (other added tokens), UNUSED (ids the vocabulary leaves empty, written as [PADn]).
"""
from __future__ import annotations

import json
from pathlib import Path

import gguf
from tokenizers import AddedToken, Regex, decoders, models, normalizers, pre_tokenizers, processors
from tokenizers import Tokenizer as HFTokenizer

from ..errors import ModelLoadError
from .config import read_json
from .gguf_file import GgufFile
from .tokenizer import Tokenizer

LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                r"\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
               r"\s*[\r\n]+|\s+(?!\S)|\s+")
SPLIT_REGEXES = {"llama-bpe": LLAMA3_REGEX, "qwen2": QWEN2_REGEX}
PRE_TYPES = ("gpt-2", "llama-bpe", "qwen2")
PRE_ALIASES = {"llama3": "llama-bpe", "llama-v3": "llama-bpe"}       # llama.cpp's other names for the same regex

TYPE = gguf.TokenType
# tokenizer_config.json special token names -> GGUF key names (llama.cpp spells "seperator")
SPECIAL_KEYS = {"bos": "bos", "eos": "eos", "unk": "unknown", "sep": "seperator", "pad": "padding", "cls": "cls",
                "mask": "mask"}
PREFIX = "tokenizer.ggml."


# ---------------------------------------------------------------------------------------------- reading
def _pre_tokenizer(pre: str):
    if pre == "gpt-2":
        return pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    return pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(SPLIT_REGEXES[pre]), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])


def _template(add_bos: bool, add_eos: bool, bos: str | None, eos: str | None, ids: dict):
    """A post-processor adding BOS / EOS as the GGUF says (None when neither is added)."""
    if add_bos and bos is None or add_eos and eos is None:
        raise ModelLoadError("the GGUF tokenizer adds a BOS/EOS token but has no such token id")
    head = f"{bos}:0 " if add_bos else ""
    tail = f" {eos}:0" if add_eos else ""
    if not head and not tail:
        return None
    specials = [(t, ids[t]) for t in dict.fromkeys(x for x, on in ((bos, add_bos), (eos, add_eos)) if on)]
    return processors.TemplateProcessing(single=f"{head}$A:0{tail}", pair=f"{head}$A:0{tail} {head}$B:1{tail}",
                                         special_tokens=specials)


def tokenizer_from_gguf(f: GgufFile) -> Tokenizer | None:
    """The file's tokenizer, or None when it carries none (token-id prompts only)."""
    if PREFIX + "model" not in f:
        return None
    where = f"{f.path}"
    kind = str(f.value(PREFIX + "model"))
    if kind != "gpt2":
        raise ModelLoadError(f"{where}: tokenizer.ggml.model {kind!r} is not supported (only 'gpt2', byte-level BPE)")
    pre = str(f.value(PREFIX + "pre", "")) or "(missing)"
    pre = PRE_ALIASES.get(pre, pre)
    if pre not in PRE_TYPES:
        raise ModelLoadError(f"{where}: tokenizer.ggml.pre {pre!r} is not supported; supported pre-tokenizers: "
                             f"{', '.join(PRE_TYPES)}")
    tokens = [str(t) for t in f.value(PREFIX + "tokens")]
    types = [int(t) for t in f.value(PREFIX + "token_type", [TYPE.NORMAL] * len(tokens))]
    merges = [str(m) for m in f.value(PREFIX + "merges", [])]
    if len(types) != len(tokens):
        raise ModelLoadError(f"{where}: {len(tokens)} tokens but {len(types)} token types")
    vocab = {tok: i for i, tok in enumerate(tokens) if types[i] != TYPE.UNUSED}
    try:
        pairs = [tuple(m.split(" ", 1)) for m in merges]
        bpe = models.BPE(vocab=vocab, merges=pairs, ignore_merges=pre == "llama-bpe", fuse_unk=False)
    except Exception as exc:  # the tokenizers library raises plain Exceptions
        raise ModelLoadError(f"{where}: the GGUF vocabulary and merges do not form a BPE model: {exc}") from exc
    hf = HFTokenizer(bpe)
    if pre == "qwen2":
        hf.normalizer = normalizers.NFC()
    hf.pre_tokenizer = _pre_tokenizer(pre)
    hf.decoder = decoders.ByteLevel()
    hf.add_tokens([AddedToken(tokens[i], special=types[i] == TYPE.CONTROL, normalized=False)
                   for i in range(len(tokens)) if types[i] in (TYPE.CONTROL, TYPE.USER_DEFINED)])
    special = {}
    for name, key in SPECIAL_KEYS.items():
        token_id = f.value(f"{PREFIX}{key}_token_id", None)
        if token_id is not None and 0 <= int(token_id) < len(tokens):
            special[f"{name}_token"] = tokens[int(token_id)]
    config = {**special, "add_bos_token": bool(f.value(PREFIX + "add_bos_token", pre == "llama-bpe")),
              "add_eos_token": bool(f.value(PREFIX + "add_eos_token", False))}
    post = _template(config["add_bos_token"], config["add_eos_token"], special.get("bos_token"),
                     special.get("eos_token"), vocab)
    if post is not None:
        hf.post_processor = post
    return Tokenizer.from_parts(hf, config, f.value("tokenizer.chat_template", None))


# ---------------------------------------------------------------------------------------------- writing
def detect_pre(tokenizer_json: dict, where: str) -> str:
    """The GGUF pre-tokenizer name of a tokenizer.json (an error for anything llama.cpp would tokenize differently)."""
    pre = tokenizer_json.get("pre_tokenizer") or {}
    if pre.get("type") == "ByteLevel" and pre.get("use_regex", True) and not pre.get("add_prefix_space", False):
        return "gpt-2"
    parts = pre.get("pretokenizers") or []
    if pre.get("type") == "Sequence" and len(parts) == 2 and parts[0].get("type") == "Split" \
            and parts[1].get("type") == "ByteLevel" and not parts[1].get("use_regex", True) \
            and str(parts[0].get("behavior", "")).lower() == "isolated" and not parts[0].get("invert"):
        regex = (parts[0].get("pattern") or {}).get("Regex")
        for name, known in SPLIT_REGEXES.items():
            if regex == known:
                return name
    raise ModelLoadError(f"{where}: its pre-tokenizer is none of those GGUF files can name ({', '.join(PRE_TYPES)}): "
                         f"{json.dumps(pre)[:200]}")


def _merges(model: dict, where: str) -> list[str]:
    merges = model.get("merges") or []
    if merges and isinstance(merges[0], list):        # newer tokenizer.json: pairs; a space inside is U+0120
        return [" ".join("".join(chr(ord(c) + 256) if c == " " else c for c in part) for part in pair)
                for pair in merges]
    if merges and not isinstance(merges[0], str):
        raise ModelLoadError(f"{where}: unknown merges format")
    return list(merges)


def _add_special_flags(tokenizer_json: dict, config: dict) -> dict[str, bool]:
    """Whether BOS / EOS are added: the post-processor's template first, then tokenizer_config.json."""
    flags: dict[str, bool] = {}
    post = tokenizer_json.get("post_processor") or {}
    for proc in post.get("processors", [post]):
        if proc.get("type") == "TemplateProcessing":
            single = proc.get("single") or []
            first = single[0].get("SpecialToken", {}).get("id") if len(single) > 1 else None
            last = single[-1].get("SpecialToken", {}).get("id") if len(single) > 1 else None
            flags["bos"] = first is not None and first == _text(config.get("bos_token"))
            flags["eos"] = last is not None and last == _text(config.get("eos_token"))
    for name in ("bos", "eos"):
        value = config.get(f"add_{name}_token")
        if isinstance(value, bool):
            flags.setdefault(name, value)
    return flags


def _text(value) -> str | None:
    return value.get("content") if isinstance(value, dict) else value


def tokenizer_entries(tokenizer_dir: str | Path, vocab_size: int, special_ids: dict[str, int] | None = None,
                      ) -> list[tuple]:
    """(key, value, type) metadata for the tokenizer of a Hugging Face folder, as llama.cpp's converter
    writes it (`TextModel._set_vocab_gpt2` and `gguf.SpecialVocab`). `special_ids` ("mask": 1, ...)
    take precedence over the folder's (a DFlash draft's own mask token, for one)."""
    tokenizer_dir = Path(tokenizer_dir)
    path = tokenizer_dir / "tokenizer.json"
    data = read_json(path, "tokenizer.json")
    config = read_json(tokenizer_dir / "tokenizer_config.json", "tokenizer_config.json") \
        if (tokenizer_dir / "tokenizer_config.json").is_file() else {}
    model = data.get("model") or {}
    if model.get("type") != "BPE" or (data.get("decoder") or {}).get("type") != "ByteLevel":
        raise ModelLoadError(f"{path}: only byte-level BPE tokenizers can be written to GGUF "
                             "(tokenizer.ggml.model gpt2)")
    pre = detect_pre(data, str(path))
    ids = dict(model.get("vocab") or {})
    added = data.get("added_tokens") or []
    ids.update({a["content"]: int(a["id"]) for a in added})
    if max(ids.values()) >= vocab_size:
        raise ModelLoadError(f"{path}: token id {max(ids.values())} is outside the model's vocabulary ({vocab_size})")
    tokens = [f"[PAD{i}]" for i in range(vocab_size)]
    types = [int(TYPE.UNUSED)] * vocab_size
    for token, token_id in ids.items():
        tokens[token_id], types[token_id] = token, int(TYPE.NORMAL)
    for a in added:
        looks_special = a["content"].startswith("<|") and a["content"].endswith("|>")
        types[int(a["id"])] = int(TYPE.CONTROL if a.get("special") or looks_special else TYPE.USER_DEFINED)
    A, S, U32, I32, BOOL = (gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.STRING, gguf.GGUFValueType.UINT32,
                            gguf.GGUFValueType.INT32, gguf.GGUFValueType.BOOL)
    entries = [(PREFIX + "model", "gpt2", S), (PREFIX + "pre", pre, S), (PREFIX + "tokens", tokens, A, S),
               (PREFIX + "token_type", types, A, I32), (PREFIX + "merges", _merges(model, str(path)), A, S)]
    by_text = {a["content"]: int(a["id"]) for a in added}
    model_config = read_json(tokenizer_dir / "config.json", "config.json") \
        if (tokenizer_dir / "config.json").is_file() else {}
    for name, key in SPECIAL_KEYS.items():
        token_id = (special_ids or {}).get(name, by_text.get(_text(config.get(f"{name}_token"))))
        if token_id is None and isinstance(model_config.get(f"{name}_token_id"), int):
            token_id = model_config[f"{name}_token_id"]
        if token_id is not None and 0 <= token_id < vocab_size:
            entries.append((f"{PREFIX}{key}_token_id", token_id, U32))
    for name, value in _add_special_flags(data, config).items():
        entries.append((f"{PREFIX}add_{name}_token", value, BOOL))
    template = Tokenizer.find_chat_template(tokenizer_dir, config)
    if template:
        entries.append(("tokenizer.chat_template", template, S))
    return entries
