"""Benchmark samples: the bundled prompt sets and SPEED-Bench / Spec-Bench files on disk.

A sample is one conversation: `turns` are the user messages, sent one request per turn
with the earlier replies in between. Both public formats have rows with `question_id`,
`category` and `turns`; they differ in how categories are reported:

* `speed` (SPEED-Bench, e.g. a parquet file of `nvidia/SPEED-Bench`): the row's category as is;
* `spec` (Spec-Bench `data/spec_bench/question.jsonl`): MT-bench's eight categories are one
  task, `mt_bench`, as Spec-Bench's `speed.py` reports them (the original is kept as
  `subcategory`).

Files may be `.jsonl` (one row per line), `.json` (an array of rows, or an object holding one
under `data`, `rows` or `questions`) or `.parquet` (needs pyarrow: `pip install specserve[bench]`).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..errors import OptionError

PROMPTS_DIR = Path(__file__).resolve().parent / "prompts"
FORMATS = ("speed", "spec")
MT_BENCH_CATEGORIES = ("writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities")


@dataclass
class Sample:
    question_id: str
    category: str
    turns: list[str]
    subcategory: str | None = None


def bundled_sets() -> list[str]:
    return sorted(p.stem for p in PROMPTS_DIR.glob("*.jsonl"))


def load_bundled(name: str) -> list[Sample]:
    path = PROMPTS_DIR / f"{name}.jsonl"
    if not path.is_file():
        raise OptionError(f"unknown bundled prompt set {name!r}; bundled sets: {', '.join(bundled_sets())} "
                          "(use --bench-file for a file of your own)")
    return load_file(path, "speed")


def _read_rows(path: Path) -> list:
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise OptionError(f"{path}: reading parquet files needs pyarrow (pip install 'specserve[bench]')") from None
        try:
            return pq.read_table(path).to_pylist()
        except Exception as exc:      # pyarrow raises several kinds for a damaged file
            raise OptionError(f"{path}: not a readable parquet file ({exc})") from None
    text = path.read_text(encoding="utf-8")
    if suffix == ".jsonl":
        rows = []
        for number, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise OptionError(f"{path}:{number}: not valid JSON ({exc.msg})") from None
        return rows
    if suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise OptionError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
        if isinstance(data, dict):
            data = next((data[k] for k in ("data", "rows", "questions") if isinstance(data.get(k), list)), None)
        if not isinstance(data, list):
            raise OptionError(f"{path}: expected an array of rows (or an object with one under 'data', 'rows' "
                              "or 'questions')")
        return data
    raise OptionError(f"{path}: unsupported file type {suffix or '(none)'}; use .jsonl, .json or .parquet")


def _turn_text(turn, where: str) -> str:
    if isinstance(turn, dict) and isinstance(turn.get("content"), str):   # a {role, content} message
        return turn["content"]
    if isinstance(turn, str):
        return turn
    raise OptionError(f"{where}: each turn must be a string, got {type(turn).__name__}")


def _sample(row, where: str, fmt: str) -> Sample:
    if not isinstance(row, dict):
        raise OptionError(f"{where}: expected an object with question_id, category and turns")
    missing = [k for k in ("question_id", "category", "turns") if row.get(k) is None]
    if missing:
        raise OptionError(f"{where}: missing field(s) {', '.join(missing)}")
    turns = row["turns"]
    turns = [turns] if isinstance(turns, str) else turns
    if not isinstance(turns, list) or not turns:
        raise OptionError(f"{where}: 'turns' must be a non-empty list of strings")
    texts = [_turn_text(t, f"{where} turn {i}") for i, t in enumerate(turns)]
    if not all(t.strip() for t in texts):
        raise OptionError(f"{where}: a turn is empty")
    category, sub = str(row["category"]), row.get("subcategory")
    if fmt == "spec" and category in MT_BENCH_CATEGORIES:
        category, sub = "mt_bench", category
    return Sample(str(row["question_id"]), category, texts, sub)


def load_file(path: str | Path, fmt: str = "speed") -> list[Sample]:
    path = Path(path)
    if fmt not in FORMATS:
        raise OptionError(f"unknown bench format {fmt!r}; valid: {', '.join(FORMATS)}")
    if not path.is_file():
        raise OptionError(f"bench file not found: {path}")
    samples = [_sample(row, f"{path} row {i}", fmt) for i, row in enumerate(_read_rows(path))]
    if not samples:
        raise OptionError(f"{path}: no samples")
    return samples


def completion_prompt(conversation: str, text: str) -> str:
    """The prompt of the next turn on a completions endpoint: the conversation so far (earlier
    prompts and replies), a newline if it does not end with one, then the new message."""
    if not conversation:
        return text
    return conversation + ("" if conversation.endswith("\n") else "\n") + text


def categories_of(samples: list[Sample]) -> list[str]:
    return list(dict.fromkeys(s.category for s in samples))


def select(samples: list[Sample], category: str = "all", limit: int | None = None) -> list[Sample]:
    """The samples of the chosen categories ('all' or a comma list), at most `limit` per category."""
    known = categories_of(samples)
    wanted = known if category.strip() in ("", "all") else [c.strip() for c in category.split(",") if c.strip()]
    unknown = [c for c in wanted if c not in known]
    if unknown:
        raise OptionError(f"unknown categor{'ies' if len(unknown) > 1 else 'y'} {', '.join(map(repr, unknown))}; "
                          f"this set has: {', '.join(known)}")
    if limit is not None and limit < 1:
        raise OptionError(f"--limit must be >= 1, got {limit}")
    chosen, counts = [], dict.fromkeys(wanted, 0)
    for s in samples:
        if s.category in counts and (limit is None or counts[s.category] < limit):
            counts[s.category] += 1
            chosen.append(s)
    return chosen
