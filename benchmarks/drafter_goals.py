"""Whether the shipped model drafters meet their speed goals on this machine, from method-table runs.

The goals, each over no speculation in CPU time (benchmarks/method_table.py, fresh engines):
  1. every model drafter is faster at T=0, on code and on free text (one slot);
  2. ... and at T=1 on its sampled path (drafts with q, verified by rejection sampling: the drafter's
     row where it is served with drafts for sampled requests, else its "+ q" row);
  3. DSpark is at least 2x on code at T=0 (one slot);
  4. DSpark is the fastest model drafter at T=1 on its sampled path (code and free text);
  5. no model drafter (nor its "+ q" row) is slower at 4 slots with --spec-schedule, in any cell.
DSpark's tau over DFlash's at an equal training budget is a held-out measurement of training runs
(docs/training.md), not of this script.

It reads method_table.py's JSON records: runs at one slot (`--one-slot`) and at 4 slots with --spec-schedule
(`--four-slots`); without them it first runs method_table.py for each (the model drafters only, best of 3,
about 2 minutes on a 2-core machine). With several runs of a kind each figure is the range across them, and
a goal is met only where every run meets it (a cell of 8 prompts takes about 0.1 s at 4 slots on a 2-core
machine, and such cells vary by a few per cent from run to run). Prints the table and writes JSON.

    .venv/bin/python benchmarks/drafter_goals.py [--one-slot runs/a.json ...] [--four-slots runs/b.json ...]
        [--out runs/drafter_goals.json]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

DRAFTERS = ("draft-simple", "draft-eagle3", "draft-mtp", "draft-dflash", "draft-dspark")
SETS = ("code", "free-text")
HERE = Path(__file__).resolve().parent


def run_method_table(out: Path, *extra: str) -> Path:
    subprocess.run([sys.executable, str(HERE / "method_table.py"), "--methods", ",".join(DRAFTERS), "--repeats", "3",
                    "--out", str(out), "--table-out", "", *extra], check=True)
    return out


class Speedups(dict):
    """(row label, prompt set, temperature) -> speedup over no speculation, of one record; a missing cell
    names the record and the row."""

    def __init__(self, record: dict):
        super().__init__({(r["method"], r["set"], float(r["temperature"])): r["speedup"] for r in record["results"]})
        self.source = record.get("source", "a method-table record")

    def __missing__(self, key):
        raise SystemExit(f"{self.source} has no cell {key[0]!r} ({key[1]}, T={key[2]:g}): run method_table.py "
                         f"with the model drafters at T=0 and T=1 on code and free text")


def sampled_row(record: dict, drafter: str) -> str:
    """The row of the drafter's sampled path: its own where it is served drafting for sampled requests."""
    lengths = record.get("draft_lengths", {}).get(drafter, [0, 0])
    return drafter if lengths[1] > 0 else f"{drafter} + q"


def evaluate(one_slot: list[dict], four_slots: list[dict]) -> list[dict]:
    """One entry per goal and drafter: the figures across runs (min, max) and whether every run meets it."""
    goals = []

    def add(goal: str, drafter: str, values: list[float], met: bool) -> None:
        goals.append({"goal": goal, "drafter": drafter, "min": min(values), "max": max(values), "met": met})

    one = [(r, Speedups(r)) for r in one_slot]
    four = [Speedups(r) for r in four_slots]
    for drafter in DRAFTERS:
        at_0 = [s[(drafter, name, 0.0)] for _, s in one for name in SETS]
        add("faster at T=0 (1 slot, code and free text)", drafter, at_0, min(at_0) > 1.0)
    for drafter in DRAFTERS:
        at_1 = [s[(sampled_row(r, drafter), name, 1.0)] for r, s in one for name in SETS]
        add("faster at T=1, sampled path (1 slot)", drafter, at_1, min(at_1) > 1.0)
    code = [s[("draft-dspark", "code", 0.0)] for _, s in one]
    add("DSpark >= 2x on code at T=0 (1 slot)", "draft-dspark", code, min(code) >= 2.0)
    margins = []          # DSpark's sampled path over the best other drafter's, per run and set
    for r, s in one:
        for name in SETS:
            others = max(s[(sampled_row(r, d), name, 1.0)] for d in DRAFTERS if d != "draft-dspark")
            margins.append(s[(sampled_row(r, "draft-dspark"), name, 1.0)] / others)
    add("DSpark the fastest at T=1 (DSpark over the best other)", "draft-dspark", margins, min(margins) > 1.0)
    for drafter in DRAFTERS:
        cells = [v for s in four for (label, _, _), v in s.items() if label in (drafter, f"{drafter} + q")]
        add("not slower at 4 slots with --spec-schedule (every cell)", drafter, cells, min(cells) >= 1.0)
    return goals


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--one-slot", type=Path, nargs="+", help="method_table.py JSON records at one slot")
    parser.add_argument("--four-slots", type=Path, nargs="+",
                        help="method_table.py JSON records at -np 4 --schedule")
    parser.add_argument("--out", type=Path, default=Path("runs/drafter_goals.json"))
    args = parser.parse_args()
    one = args.one_slot or [run_method_table(args.out.with_name("drafter_goals_1_slot.json"))]
    four = args.four_slots or [run_method_table(args.out.with_name("drafter_goals_4_slots.json"), "-np", "4",
                                                "--schedule")]
    one_slot, four_slots = ([{**json.loads(p.read_text()), "source": str(p)} for p in paths] for paths in (one, four))
    for records, wanted, option in ((one_slot, (1, False), "--one-slot"), (four_slots, (4, True), "--four-slots")):
        for record in records:
            if (record.get("parallel"), bool(record.get("schedule"))) != wanted:
                raise SystemExit(f"{option} {record['source']}: a run at {record.get('parallel')} slot(s), "
                                 f"--schedule {bool(record.get('schedule'))}; it takes runs at {wanted[0]} slot(s), "
                                 f"--schedule {wanted[1]}")
    goals = evaluate(one_slot, four_slots)
    machines = sorted({r.get("machine", "?") for r in one_slot + four_slots})
    print(f"speedup over no speculation (CPU time), {len(one_slot)} run(s) at 1 slot, {len(four_slots)} at 4 slots; "
          f"{'; '.join(machines)}")
    print(f"{'goal':<58} {'drafter':<14} {'measured':>12}  met")
    for g in goals:
        shown = f"{g['min']:.2f}-{g['max']:.2f}x" if g["max"] > g["min"] else f"{g['min']:.2f}x"
        print(f"{g['goal']:<58} {g['drafter']:<14} {shown:>12}  {'yes' if g['met'] else 'no'}")
    print(f"\n{sum(g['met'] for g in goals)} of {len(goals)} met")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"one_slot": [str(p) for p in one], "four_slots": [str(p) for p in four],
                                    "machines": machines, "goals": goals}, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
