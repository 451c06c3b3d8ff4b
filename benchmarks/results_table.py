"""Benchmark tables as Markdown files under docs/results/, which the documentation links to.

The scripts whose figures the documentation quotes take the same three options (`add_options`):

  --table-out PATH   where to write the Markdown table (default: docs/results/<name>.md; '' = nowhere)
  --from-json FILE.. write the table from earlier runs' JSON (the script's --out) instead of measuring
  --note TEXT        conditions to record with the figures (the machine, whether it was quiet, ...)

Each file starts with a title, the date of the measurement, the machine and the conditions, so a
page that links to it always shows the last measured result and where it came from.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "docs" / "results"


def add_options(parser: argparse.ArgumentParser, name: str) -> None:
    results = parser.add_argument_group("results table")
    results.add_argument("--table-out", default=str((RESULTS / f"{name}.md").relative_to(ROOT)),
                         help=f"Markdown table for the docs (default: docs/results/{name}.md; '' = none)")
    results.add_argument("--from-json", type=Path, nargs="+",
                         help="write the table from these earlier runs' JSON files instead of measuring")
    results.add_argument("--note", default="", help="conditions recorded with the table, e.g. 'quiet machine'")


def load_runs(args) -> list[dict] | None:
    """The earlier runs' records when --from-json is given, else None (measure)."""
    return [json.loads(path.read_text()) for path in args.from_json] if args.from_json else None


def write_json(path: Path, record: dict) -> None:
    """The run's full record (what --from-json reads back)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2))
    print(f"\nwrote {path}")


def machine() -> str:
    return f"{platform.platform()}, {os.cpu_count()} CPUs"


def write_table(args, title: str, body: str, conditions: str = "", measured_on: str | None = None) -> None:
    """Write `body` (Markdown) to --table-out with a heading that says when, where and how it was measured.

    measured_on: the machine as the run's JSON recorded it (default: this machine)."""
    if not args.table_out:
        return
    script = Path(sys.argv[0]).name
    if args.from_json:
        when = datetime.date.fromtimestamp(max(p.stat().st_mtime for p in args.from_json)).isoformat()
    else:
        when = datetime.date.today().isoformat()
    where = measured_on or machine()
    about = " ".join(part for part in (conditions.strip(), args.note.strip()) if part)
    head = [f"# {title}", "",
            f"<!-- Written by benchmarks/{script}; run it again to replace this file. -->", "",
            f"Measured {when} on {where} by `benchmarks/{script}`." + (f" {about}" if about else ""), "", ""]
    path = Path(args.table_out)
    if not path.is_absolute():
        path = ROOT / path
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(head) + body.rstrip() + "\n")
    print(f"wrote {path}")


def fmt(value, digits: int = 1, missing: str = "-") -> str:
    return missing if value is None else f"{value:.{digits}f}"
