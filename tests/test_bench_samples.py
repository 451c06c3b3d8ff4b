"""Bench prompt sets: the bundled set and SPEED-Bench / Spec-Bench files in json, jsonl and parquet."""
from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from specserve.bench.samples import bundled_sets, categories_of, load_bundled, load_file, select
from specserve.bundled import STDLIB_CODER
from specserve.errors import OptionError
from specserve.models.tokenizer import Tokenizer

SPEED_ROWS = [
    {"question_id": "c-1", "category": "coding", "turns": ["Write a sort.", "Now make it stable."]},
    {"question_id": "c-2", "category": "coding", "turns": ["Write a parser."]},
    {"question_id": "w-1", "category": "writing", "turns": ["Write a poem."]},
]
# Spec-Bench: integer ids; MT-bench's categories form one task, the others are tasks themselves
SPEC_ROWS = [
    {"question_id": 81, "category": "writing", "turns": ["Compose a blog post.", "Rewrite it as a limerick."]},
    {"question_id": 82, "category": "coding", "turns": ["Write a program.", "Explain it."]},
    {"question_id": 161, "category": "translation", "turns": ["Translate: Guten Morgen."]},
    {"question_id": 241, "category": "summarization", "turns": ["Summarise: ..."]},
]


def write(path, rows, kind):
    if kind == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    elif kind == "json":
        path.write_text(json.dumps(rows))
    else:
        pq.write_table(pa.Table.from_pylist(rows), path)
    return path


@pytest.mark.parametrize("kind", ["jsonl", "json", "parquet"])
def test_speed_bench_files(tmp_path, kind):
    samples = load_file(write(tmp_path / f"speed.{kind}", SPEED_ROWS, kind), "speed")
    assert [(s.question_id, s.category, s.turns) for s in samples] == \
        [(r["question_id"], r["category"], r["turns"]) for r in SPEED_ROWS]
    assert categories_of(samples) == ["coding", "writing"]


@pytest.mark.parametrize("kind", ["jsonl", "json", "parquet"])
def test_spec_bench_files(tmp_path, kind):
    samples = load_file(write(tmp_path / f"question.{kind}", SPEC_ROWS, kind), "spec")
    assert [s.category for s in samples] == ["mt_bench", "mt_bench", "translation", "summarization"]
    assert [s.subcategory for s in samples[:2]] == ["writing", "coding"]
    assert samples[0].question_id == "81" and samples[0].turns == SPEC_ROWS[0]["turns"]
    # read as SPEED-Bench rows the categories stay as they are
    assert [s.category for s in load_file(tmp_path / f"question.{kind}", "speed")][:2] == ["writing", "coding"]


def test_json_object_with_rows_and_message_turns(tmp_path):
    path = tmp_path / "wrapped.json"
    path.write_text(json.dumps({"data": [{"question_id": 1, "category": "qa",
                                          "turns": [{"role": "user", "content": "Why?"}]},
                                         {"question_id": 2, "category": "qa", "turns": "Single turn."}]}))
    samples = load_file(path)
    assert [s.turns for s in samples] == [["Why?"], ["Single turn."]]


@pytest.mark.parametrize("content, message", [
    ('{"question_id": 1, "turns": ["x"]}\n', r"missing field\(s\) category"),
    ('{"question_id": 1, "category": "a", "turns": []}\n', "non-empty list"),
    ('{"question_id": 1, "category": "a", "turns": [3]}\n', "must be a string"),
    ('{"question_id": 1, "category": "a", "turns": ["  "]}\n', "a turn is empty"),
    ('{"question_id": 1,\n', "not valid JSON"),
    ('', "no samples"),
])
def test_bad_rows_are_named(tmp_path, content, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    with pytest.raises(OptionError, match=message):
        load_file(path)


def test_bad_files(tmp_path):
    with pytest.raises(OptionError, match="not found"):
        load_file(tmp_path / "missing.jsonl")
    (tmp_path / "rows.csv").write_text("a,b\n")
    with pytest.raises(OptionError, match="unsupported file type .csv"):
        load_file(tmp_path / "rows.csv")
    (tmp_path / "broken.parquet").write_bytes(b"not parquet")
    with pytest.raises(OptionError, match="not a readable parquet file"):
        load_file(tmp_path / "broken.parquet")
    (tmp_path / "scalar.json").write_text("3")
    with pytest.raises(OptionError, match="expected an array of rows"):
        load_file(tmp_path / "scalar.json")
    with pytest.raises(OptionError, match="unknown bench format"):
        load_file(tmp_path / "scalar.json", "mtbench")
    with pytest.raises(OptionError, match="unknown bundled prompt set 'nope'.*qualitative"):
        load_bundled("nope")


def test_select_by_category_and_limit(tmp_path):
    samples = load_file(write(tmp_path / "s.jsonl", SPEED_ROWS, "jsonl"))
    assert [s.question_id for s in select(samples, "all", 1)] == ["c-1", "w-1"]
    assert [s.question_id for s in select(samples, "writing,coding")] == ["c-1", "c-2", "w-1"]
    with pytest.raises(OptionError, match="unknown category 'math'; this set has: coding, writing"):
        select(samples, "math")
    with pytest.raises(OptionError, match="--limit must be >= 1"):
        select(samples, "all", 0)


def test_bundled_set_covers_the_categories_and_fits_the_bundled_model():
    assert "qualitative" in bundled_sets()
    samples = load_bundled("qualitative")
    categories = categories_of(samples)
    assert categories == ["coding", "code_editing", "math", "summarization", "qa", "writing", "multi_turn"]
    for category in categories:
        assert 6 <= sum(s.category == category for s in samples) <= 10
    assert len({s.question_id for s in samples}) == len(samples)
    assert all(len(s.turns) >= 2 for s in samples if s.category == "multi_turn")
    tokenizer = Tokenizer(STDLIB_CODER)
    # short prompts: even a three-turn conversation with 256-token replies fits the 1024-token context
    assert max(len(tokenizer.encode(t)) for s in samples for t in s.turns) < 200
    assert max(sum(len(tokenizer.encode(t)) for t in s.turns) + 256 * len(s.turns) for s in samples) < 1024
