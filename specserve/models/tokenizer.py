"""tokenizer.json + tokenizer_config.json (or the tokenizer of a GGUF file: gguf_tokenizer.py), with chat
templates rendered by jinja2 the way transformers renders them, and incremental detokenization for streaming."""
from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import Tokenizer as HFTokenizer

from ..errors import InvalidRequestError, ModelLoadError
from .config import read_json


def _token_text(value) -> str | None:
    if isinstance(value, dict):
        return value.get("content")
    return value


def _raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def _tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(fmt):
    return datetime.now().strftime(fmt)


class Tokenizer:
    def __init__(self, model_dir: str | Path):
        model_dir = Path(model_dir)
        path = model_dir / "tokenizer.json"
        if not path.is_file():
            raise ModelLoadError(f"tokenizer.json not found in {model_dir}")
        try:
            tok = HFTokenizer.from_file(str(path))
        except Exception as exc:  # the tokenizers library raises plain Exceptions
            raise ModelLoadError(f"cannot load {path}: {exc}") from exc
        cfg_path = model_dir / "tokenizer_config.json"
        config = read_json(cfg_path, "tokenizer_config.json") if cfg_path.is_file() else {}
        self._setup(tok, config, self.find_chat_template(model_dir, config))

    @classmethod
    def from_parts(cls, tok: HFTokenizer, config: dict, chat_template: str | None) -> "Tokenizer":
        """A tokenizer built elsewhere (from GGUF metadata): `config` holds tokenizer_config.json's keys."""
        self = cls.__new__(cls)
        self._setup(tok, config, chat_template)
        return self

    def _setup(self, tok: HFTokenizer, config: dict, chat_template: str | None) -> None:
        self.tok = tok
        self.config = config
        self.chat_template = chat_template
        self.special = {key: _token_text(self.config.get(key)) for key in
                        ("bos_token", "eos_token", "unk_token", "pad_token", "mask_token")}
        self.eos_token_id = self.token_to_id(self.special["eos_token"])
        self.bos_token_id = self.token_to_id(self.special["bos_token"])
        self.vocab_size = self.tok.get_vocab_size(with_added_tokens=True)
        self._template = None

    @staticmethod
    def find_chat_template(model_dir: Path, config: dict) -> str | None:
        jinja_file = model_dir / "chat_template.jinja"
        if jinja_file.is_file():
            return jinja_file.read_text(encoding="utf-8")
        template = config.get("chat_template")
        if isinstance(template, list):       # named templates: use "default"
            named = {t.get("name"): t.get("template") for t in template}
            template = named.get("default") or next(iter(named.values()), None)
        return template

    def token_to_id(self, token: str | None) -> int | None:
        return None if token is None else self.tok.token_to_id(token)

    def id_to_token(self, token_id: int) -> str | None:
        return self.tok.id_to_token(token_id)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return self.tok.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        return self.tok.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def apply_chat_template(self, messages: list[dict], add_generation_prompt: bool = True, **kwargs) -> str:
        if not self.chat_template:
            raise InvalidRequestError("this model has no chat template; use a completion endpoint instead")
        if self._template is None:
            env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                extensions=["jinja2.ext.loopcontrols"])
            env.filters["tojson"] = _tojson
            env.globals["raise_exception"] = _raise_exception
            env.globals["strftime_now"] = _strftime_now
            try:
                self._template = env.from_string(self.chat_template)
            except jinja2.TemplateSyntaxError as exc:
                raise ModelLoadError(f"chat template does not parse: {exc}") from exc
        values = {k: v for k, v in self.special.items() if v is not None}
        values.update(kwargs)
        try:
            return self._template.render(messages=messages, add_generation_prompt=add_generation_prompt, **values)
        except jinja2.TemplateError as exc:
            raise InvalidRequestError(f"chat template error: {exc}") from exc


def load_tokenizer(model: str | Path) -> Tokenizer | None:
    """The tokenizer of a model folder or GGUF file; None when it has none (token-id prompts only)."""
    from .gguf_file import GgufFile, is_gguf
    if is_gguf(model):
        from .gguf_tokenizer import tokenizer_from_gguf
        return tokenizer_from_gguf(GgufFile(model))
    model = Path(model)
    return Tokenizer(model) if (model / "tokenizer.json").is_file() else None


class IncrementalDetokenizer:
    """Turns a growing list of token ids into text deltas without re-decoding everything.

    Decodes a small window behind the read position so multi-byte characters split over
    tokens are emitted only once complete (a trailing U+FFFD means "not yet").
    """

    def __init__(self, tokenizer: Tokenizer):
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self.prefix_offset = 0
        self.read_offset = 0

    def push(self, new_ids: list[int]) -> str:
        self.ids.extend(new_ids)
        decode = self.tokenizer.decode
        prefix_text = decode(self.ids[self.prefix_offset:self.read_offset])
        new_text = decode(self.ids[self.prefix_offset:])
        if len(new_text) > len(prefix_text) and not new_text.endswith("\ufffd"):
            delta = new_text[len(prefix_text):]
            self.prefix_offset = self.read_offset
            self.read_offset = len(self.ids)
            return delta
        return ""

    def flush(self) -> str:
        """Whatever is still held back (an incomplete character at the very end)."""
        prefix_text = self.tokenizer.decode(self.ids[self.prefix_offset:self.read_offset])
        new_text = self.tokenizer.decode(self.ids[self.prefix_offset:])
        self.prefix_offset = self.read_offset = len(self.ids)
        return new_text[len(prefix_text):]
