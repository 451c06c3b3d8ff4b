"""One declared option: its flags, where its value goes, its type, default and help.

Every setting a user can give is declared once, as an Option, next to the code that owns
it (a proposer's options in its own module). The command line (options.py), the server's
/props, the generated option tables in docs/ and the typed settings a component reads
(`read_options`) all come from these declarations, so a default is written exactly once.
"""
from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Iterable


@dataclass(frozen=True)
class Option:
    flags: tuple[str, ...]
    dest: str
    type: type
    default: Any
    help: str
    env: str | None = None

    def value(self, values: dict):
        """This option's value in `values` (by dest), converted to its type; the default when absent."""
        raw = values.get(self.dest)
        if raw is None:
            return self.default
        return bool(raw) if self.type is bool else self.type(raw)


def read_options(declared: Iterable[Option], values: dict, prefix: str = "") -> SimpleNamespace:
    """Typed settings from option values: one attribute per declared option, named by its dest
    with `prefix` removed (read_options(opts, values, "spec_draft_").n_max)."""
    return SimpleNamespace(**{opt.dest.removeprefix(prefix): opt.value(values) for opt in declared})
