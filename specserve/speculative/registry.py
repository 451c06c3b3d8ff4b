"""--spec-type names -> Proposer classes, and llama.cpp's fixed precedence between them.

To add a method: write speculative/<method>.py with a Proposer subclass and add one line to
REGISTRY below ("name": "module:Class").
"""
from __future__ import annotations

import importlib

from ..errors import OptionError
from ..option import Option
from .base import Proposer

# llama.cpp's order, whatever order the user lists types in (docs/reference/llamacpp-speculative.md §1.2)
PRECEDENCE = [
    "ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache",
    "draft-simple", "draft-eagle3", "draft-mtp", "draft-dflash", "draft-dspark",
]

REGISTRY: dict[str, str | type] = {
    "ngram-simple": "ngram_simple:NgramSimple",
    "ngram-map-k": "ngram_map:NgramMapK",
    "ngram-map-k4v": "ngram_map:NgramMapK4v",
    "ngram-mod": "ngram_mod:NgramMod",
    "ngram-cache": "ngram_cache:NgramCacheProposer",
    "draft-simple": "draft_simple:DraftSimple",
    "draft-eagle3": "eagle3:Eagle3Proposer",
    "draft-mtp": "mtp:MtpProposer",
    "draft-dflash": "dflash:DFlash",
    "draft-dspark": "dspark:DSpark",
}


def proposer_class(name: str) -> type[Proposer]:
    entry = REGISTRY[name]
    if isinstance(entry, type):
        return entry
    module, cls = entry.split(":")
    return getattr(importlib.import_module(f"{__package__}.{module}"), cls)


def _in_order(names) -> list[str]:
    """Precedence order; types outside PRECEDENCE (plug-ins) come last, in the given order."""
    return [n for n in PRECEDENCE if n in names] + [n for n in names if n not in PRECEDENCE]


def available_types() -> list[str]:
    return ["none"] + _in_order(list(REGISTRY))


def parse_spec_types(value: str | list[str] | None) -> list[str]:
    """Comma list -> enabled types in precedence order; 'none' anywhere disables speculation."""
    if value is None:
        return []
    items = value.split(",") if isinstance(value, str) else list(value)
    names = [s.strip() for s in items if s and s.strip()]
    unknown = [n for n in names if n != "none" and n not in REGISTRY]
    if unknown:
        raise OptionError(f"unknown spec type(s) {', '.join(map(repr, unknown))}; "
                          f"valid types: {', '.join(available_types())}")
    if "none" in names:
        return []
    return _in_order(list(dict.fromkeys(names)))


DEFAULT_SPEC_TYPE = "ngram-mod"      # what --spec-default enables (llama.cpp #22223)


def resolve_spec_types(value: str | list[str] | None, spec_default: bool = False) -> list[str]:
    """parse_spec_types, plus --spec-default: ngram-mod when no type is given (or 'none')."""
    types = parse_spec_types(value)
    return [DEFAULT_SPEC_TYPE] if spec_default and not types else types


def all_options() -> list[Option]:
    """Options declared by every registered proposer (for the CLI and the server)."""
    return [opt for name in REGISTRY for opt in proposer_class(name).options]


def model_drafter_type(spec_types: list[str]) -> str | None:
    """The model drafter among spec types (ngram-mod, draft-dspark -> draft-dspark), None if there is none."""
    return next((t for t in spec_types if t in REGISTRY and t != "none" and proposer_class(t).model_drafter), None)


def draftless_types() -> list[str]:
    """The types that draft from the token history alone (no model), in precedence order."""
    return [n for n in available_types() if n != "none" and not proposer_class(n).model_drafter]
