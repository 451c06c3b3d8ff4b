"""`specserve <command>`: each command lives in its own module with add_arguments() and run()."""
from __future__ import annotations

import argparse
import importlib
import logging
import sys

from .errors import SpecServeError

COMMANDS = {
    "generate": ("specserve.commands.generate", "generate text from a prompt (llama.cpp-style options)"),
    "serve": ("specserve.commands.serve", "OpenAI- and llama-server-compatible HTTP server"),
    "serve-ray": ("specserve.commands.serve_ray", "`serve` replicated behind Ray Serve (the optional ray extra)"),
    "demo": ("specserve.commands.demo", "baseline vs every speculative method on the bundled model"),
    "lookup": ("specserve.commands.lookup", "n-gram cache files for ngram-cache: create, merge, stats"),
    "bench": ("specserve.commands.bench", "benchmark client (SPEED-Bench style): run, sweep, compare, report"),
    "train-draft": ("specserve.commands.train_draft",
                    "train a drafter (dflash, dspark, draft-simple, eagle3, mtp) for a target model"),
    "convert-draft": ("specserve.commands.convert_draft", "write a DFlash/DSpark draft as a self-contained folder"),
    "export-gguf": ("specserve.commands.export_gguf",
                    "write a model or drafter as a GGUF file for llama.cpp (f32, f16, bf16, q8_0)"),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="specserve", description="speculative-decoding inference engine")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    argv = sys.argv[1:] if argv is None else argv
    # import only the command being run (the server pulls in a web stack, for example)
    wanted = [argv[0]] if argv and argv[0] in COMMANDS else list(COMMANDS)
    modules = {}
    try:
        for name, (module_name, help_text) in COMMANDS.items():
            parser_for = sub.add_parser(name, help=help_text, description=help_text)
            if name in wanted:
                modules[name] = importlib.import_module(module_name)
                modules[name].add_arguments(parser_for)
        args = parser.parse_args(argv)
    except SpecServeError as exc:       # a bad environment variable value
        print(f"error: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    try:
        return int(modules[args.command].run(args) or 0)
    except SpecServeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
