"""The training corpus: the `.py` files of the running interpreter's standard library.

The split is by file and depends only on the file's path relative to the stdlib root,
so it is identical on every machine with the same Python version: a file is held out
iff sha1(relative posix path) % 20 == 0 (about 5 % of the files).
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
import sysconfig
import tokenize
from pathlib import Path

import numpy as np

HELD_OUT_MODULUS = 20
EOS_TOKEN = "<|endoftext|>"
MASK_TOKEN = "<|mask|>"


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def python_version() -> str:
    return ".".join(map(str, sys.version_info[:3]))


def list_files(root: str | Path | None = None) -> list[str]:
    """Sorted relative posix paths of every `.py` file under root, without site-packages."""
    root = Path(root) if root is not None else stdlib_root()
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != "site-packages")
        for name in filenames:
            if name.endswith(".py"):
                out.append((Path(dirpath) / name).relative_to(root).as_posix())
    return sorted(out)


def is_held_out(rel_path: str) -> bool:
    digest = hashlib.sha1(rel_path.encode("utf-8")).hexdigest()
    return int(digest, 16) % HELD_OUT_MODULUS == 0


def split_files(files: list[str]) -> tuple[list[str], list[str]]:
    """(train, held_out), each keeping the input order."""
    train = [f for f in files if not is_held_out(f)]
    held = [f for f in files if is_held_out(f)]
    return train, held


def read_source(path: str | Path) -> str:
    """A source file as text: UTF-8, else its PEP 263 coding cookie, else UTF-8 with replacement.

    A handful of stdlib test files are deliberately not UTF-8.
    """
    data = Path(path).read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        pass
    try:
        with open(path, "rb") as handle:
            encoding, _ = tokenize.detect_encoding(handle.readline)
        return data.decode(encoding)
    except (SyntaxError, LookupError, UnicodeDecodeError):
        return data.decode("utf-8", errors="replace")


def iter_texts(root: str | Path, files: list[str]):
    root = Path(root)
    for rel in files:
        yield read_source(root / rel)


def _cache_key(root: Path, files: list[str], tokenizer_json: str) -> str:
    """Hash of the file list (with sizes, so an edited stdlib invalidates it) and the tokenizer."""
    h = hashlib.sha256()
    for rel in files:
        h.update(f"{rel}\0{(root / rel).stat().st_size}\n".encode())
    h.update(hashlib.sha256(tokenizer_json.encode()).digest())
    return h.hexdigest()[:20]


def encode_files(tokenizer, root: str | Path, files: list[str], cache_dir: str | Path | None = None,
                 batch: int = 64) -> np.ndarray:
    """Token ids of the files, in order, each document followed by the eos token (uint16).

    `tokenizer` is a `tokenizers.Tokenizer`. Results are cached as .npy under cache_dir.
    """
    root = Path(root)
    cache_path = None
    if cache_dir is not None:
        key = _cache_key(root, files, tokenizer.to_str())
        cache_path = Path(cache_dir) / f"tokens-{key}.npy"
        if cache_path.is_file():
            return np.load(cache_path)
    eos = tokenizer.token_to_id(EOS_TOKEN)
    mask = tokenizer.token_to_id(MASK_TOKEN)
    assert tokenizer.get_vocab_size() <= 65536, "uint16 storage needs a vocabulary below 65536"
    chunks = []
    for start in range(0, len(files), batch):
        texts = list(iter_texts(root, files[start:start + batch]))
        for enc in tokenizer.encode_batch(texts, add_special_tokens=False):
            ids = np.asarray(enc.ids, dtype=np.uint16)
            # Special tokens are matched literally in text; keep both out of the data.
            ids = ids[(ids != mask) & (ids != eos)]
            chunks.append(ids)
            chunks.append(np.asarray([eos], dtype=np.uint16))
    tokens = np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.uint16)
    if cache_path is not None:
        cache_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache_path.with_suffix(".tmp.npy")
        np.save(tmp, tokens)
        os.replace(tmp, cache_path)
        cache_path.with_suffix(".json").write_text(json.dumps(
            {"root": str(root), "n_files": len(files), "n_tokens": int(tokens.size)}, indent=1))
    return tokens
