"""The option reference page, docs/options.md, generated from the declarations.

Options declared as `Option` (specserve/option.py) are rendered with their flags, environment
variables, default and help, grouped as the command line groups them. The commands that still
declare plain argparse arguments (bench, demo, lookup, train-draft, convert-draft and a few
arguments of generate) are rendered from the parsers the CLI builds, so every flag of every
command is listed. tests/test_docs.py fails when the page differs from what this module writes.

    python -m specserve.option_docs            # (re)write docs/options.md
    python -m specserve.option_docs --check    # exit status 1 when docs/options.md is out of date
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

from .option import Option

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "options.md"
REGENERATE = "python -m specserve.option_docs"


@dataclass
class Section:
    title: str
    anchor: str
    options: list[Option]


def _sections() -> list[Section]:
    from .commands.serve import SERVER_OPTIONS
    from .options import MODEL_OPTIONS, SAMPLING_OPTIONS
    from .speculative.option_table import SPEC_OPTIONS
    from .speculative.registry import all_options
    return [Section("Model and engine", "model-and-engine", MODEL_OPTIONS),
            Section("Sampling", "sampling", SAMPLING_OPTIONS),
            Section("Speculative decoding", "speculative-decoding", SPEC_OPTIONS),
            Section("Speculative methods", "speculative-methods", all_options()),
            Section("Server", "server", SERVER_OPTIONS)]


# ---------------------------------------------------------------- cells
def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _code(text: str) -> str:
    return f"`{text}`"


def _default(value) -> str:
    if value is None or value is argparse.SUPPRESS:
        return ""
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, str):
        if os.path.isabs(value):
            path = Path(value)
            value = str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else value
        if "\n" in value or len(value) > 40:
            return "see meaning"
        return _code(value) if value else '`""`'
    return _code(value)


def _flags(flags) -> str:
    return ", ".join(_code(f) for f in flags)


def _declared_table(options: list[Option], with_keyword: bool) -> list[str]:
    from .options import env_names
    head = "| option | environment | default | meaning |"
    rule = "|---|---|---|---|"
    if with_keyword:
        head, rule = "| option | environment | `LLM` keyword | default | meaning |", "|---|---|---|---|---|"
    lines = [head, rule]
    for opt in options:
        keyword = f" {_code(opt.dest)} |" if with_keyword else ""
        envs = ", ".join(_code(e) for e in dict.fromkeys(env_names(opt)))
        lines.append(f"| {_flags(opt.flags)} | {envs} |{keyword} "
                     f"{_default(opt.default)} | {_cell(opt.help)} |")
    return lines


# ---------------------------------------------------------------- declared options
def _method_blocks() -> list[str]:
    from .speculative.draft_options import DRAFT_OPTIONS
    from .speculative.registry import available_types, proposer_class
    draft_flags = ", ".join(_code(o.flags[0]) for o in DRAFT_OPTIONS)
    lines = []
    for name in available_types():
        if name == "none":
            continue
        cls = proposer_class(name)
        lines += ["", f"### {name}", ""]
        if cls.model_drafter:
            lines.append(f"A model drafter: it reads {_code('-md')} and the draft options of "
                         f"[speculative decoding](#speculative-decoding) ({draft_flags}).")
            lines.append("")
        if cls.options:
            lines += _declared_table(cls.options, with_keyword=True)
        else:
            lines.append("No options of its own.")
    return lines


def _declared_part(sections: list[Section]) -> list[str]:
    lines = []
    for section in sections:
        lines += ["", f"## {section.title}", ""]
        if section.anchor == "speculative-methods":
            lines.append("Each method's own options, in the order the methods take precedence.")
            lines += _method_blocks()
            continue
        lines += _declared_table(section.options, with_keyword=section.anchor == "speculative-decoding")
    return lines


# ---------------------------------------------------------------- argparse commands
def _is_declared(action: argparse.Action, opt: Option | None) -> bool:
    """Whether add_options made this argument from `opt` (same flags, and the help it writes)."""
    return (opt is not None and tuple(action.option_strings) == opt.flags
            and (action.help or "").startswith(opt.help + " ("))


def _plain_row(action: argparse.Action) -> str:
    if action.option_strings:
        flags = _flags(action.option_strings)
    else:
        name = (action.metavar or action.dest).upper()
        flags = _code(f"{name} ..." if action.nargs in ("+", "*") else name)
    if isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction)):
        # a flag: whether what it names happens when it is not given (-e is on by default, --no-escape off)
        default = "on" if action.default == isinstance(action, argparse._StoreTrueAction) else "off"
    elif action.required and action.option_strings:
        default = "required"
    else:
        default = _default(action.default)
    meaning = action.help or ""
    if action.choices and not all(str(c) in meaning for c in action.choices):
        meaning = f"{meaning} (one of: {', '.join(map(str, action.choices))})".strip()
    return f"| {flags} | {default} | {_cell(meaning)} |"


def _also_lines(parser: argparse.ArgumentParser, sections: list[Section]) -> list[str]:
    """One line per argument group made of declared options: which sections, what is left out, what differs."""
    lines = []
    for group in parser._action_groups:
        for section in sections:
            declared = {o.dest: o for o in section.options}
            taken = [a for a in group._group_actions if _is_declared(a, declared.get(a.dest))]
            if not taken:
                continue
            dests = {a.dest for a in taken}
            notes = []
            missing = [o for o in section.options if o.dest not in dests]
            if missing:
                notes.append("without " + ", ".join(_code(o.flags[-1]) for o in missing))
            for a in taken:
                if a.default != declared[a.dest].default:
                    notes.append(f"{_code(a.option_strings[0])} defaults to {_default(a.default)} here")
            extra = f" ({'; '.join(notes)})" if notes else ""
            where = f" (group *{_cell(group.title)}*)" if group.title.lower() != section.title.lower() else ""
            lines.append(f"- the [{section.title.lower()}](#{section.anchor}) options{extra}{where}")
    return lines


def _parser_block(parser: argparse.ArgumentParser, title: str, description: str,
                  sections: list[Section]) -> list[str]:
    lines = ["", f"### {title}", ""]
    if description:
        lines += [_cell(description), ""]
    declared = {o.dest: o for s in sections for o in s.options}
    subparsers = None
    tables: dict[str, list[str]] = {}          # argument group title ("" = the command's own) -> rows
    for group in parser._action_groups:
        name = "" if group.title in ("positional arguments", "options", "optional arguments") else group.title
        for action in group._group_actions:
            if isinstance(action, argparse._HelpAction):
                continue
            if isinstance(action, argparse._SubParsersAction):
                subparsers = action
                continue
            if not _is_declared(action, declared.get(action.dest)):
                tables.setdefault(name, []).append(_plain_row(action))
    for name, rows in tables.items():
        if name:
            lines += [f"*{_cell(name)}*", ""]
        lines += ["| argument | default | meaning |", "|---|---|---|", *rows, ""]
    also = _also_lines(parser, sections)
    if also:
        lines += ["Also takes:", "", *also, ""]
    if lines[-1] == "":
        lines.pop()
    if subparsers is not None:
        helps = {a.dest: a.help for a in subparsers._choices_actions}
        for name, sub in subparsers.choices.items():
            lines += _parser_block(sub, f"{title.rstrip('`')} {name}`", sub.description or helps.get(name, ""),
                                   sections)
    return lines


def _command_part(sections: list[Section]) -> list[str]:
    from .cli import COMMANDS
    lines = ["", "## Commands", "",
             "The arguments of every command: those of its own, then the groups of declared options above "
             "that it takes as well."]
    for name, (module_name, help_text) in COMMANDS.items():
        parser = argparse.ArgumentParser(prog=f"specserve {name}")
        importlib.import_module(module_name).add_arguments(parser)
        lines += _parser_block(parser, f"`specserve {name}`", help_text, sections)
    return lines


HEADER = f"""# Options

<!-- Generated by `{REGENERATE}` from the declarations; edit the code, not this page. -->

Every option below is declared once in the code. This page is generated from those declarations
(`{REGENERATE}` rewrites it) and `tests/test_docs.py` checks that it is current.

Option names follow llama.cpp. Each declared option can also be set from the environment: the
first variable listed is llama.cpp's name (`LLAMA_ARG_*`), the second this project's
(`SPECSERVE_*`). A flag on the command line wins over the environment, which wins over the default.
A switch (default `off`) takes `1`, `true`, `yes`, `on` or `enabled` from the environment.

`specserve generate` and `specserve serve` take the model, sampling and speculative options;
`serve` adds the server options. `specserve bench run` and `sweep` take the engine and speculative
options with `--model-dir` (see [Commands](#commands)). In the Python API, `LLM(...)` takes every
speculative option as a keyword (the `LLM` keyword column); see [python-api.md](python-api.md)."""


def render() -> str:
    """The page's text. Built with the option variables removed from the environment, so that the
    page shows the declared defaults whatever the caller's environment holds."""
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith(("LLAMA_ARG_", "SPECSERVE_")) and k != "LLAMA_API_KEY"}
    with mock.patch.dict(os.environ, clean, clear=True):
        sections = _sections()
        lines = [HEADER, *_declared_part(sections), *_command_part(sections)]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specserve.option_docs", description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="only check that the page is current")
    parser.add_argument("--out", type=Path, default=PAGE, help="the page to write (default: docs/options.md)")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = args.out.read_text() if args.out.is_file() else ""
        if current != text:
            print(f"{args.out} is out of date: run `{REGENERATE}`", file=sys.stderr)
            return 1
        return 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
