"""The JSON files the bench commands write and read: run, sweep and compare records.

Every record has `kind` ("run", "sweep" or "compare"). A file written by llama.cpp's
SPEED-Bench client (no `kind`, but `summary` and `results`) reads as a run.
"""
from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from ..errors import OptionError
from .results import SampleResult
from .samples import Sample
from .summary import summarise
from .tables import SUMMARY_HEADERS, summary_rows, text_table

KINDS = ("run", "sweep", "compare")


def run_record(config: dict, samples: list[Sample], results: list[SampleResult], elapsed: float) -> dict:
    failed = [r for r in results if not r.success]
    return {
        "kind": "run",
        "config": config,
        "selected_samples": len(samples),
        "completed_samples": len(results) - len(failed),
        "failed_samples": len(failed),
        "elapsed": elapsed,
        "summary": summarise(results, elapsed),
        "failures": [{"question_id": r.question_id, "category": r.category, "error": r.error} for r in failed],
        "results": [asdict(r) for r in results],
    }


def write_json(path: str | Path, record: dict) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")


def load_record(path: str | Path, kinds: tuple[str, ...] = KINDS) -> dict:
    path = Path(path)
    if not path.is_file():
        raise OptionError(f"file not found: {path}")
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise OptionError(f"{path}: not a JSON file ({exc})") from None
    if not isinstance(record, dict):
        raise OptionError(f"{path}: expected a JSON object written by specserve bench")
    kind = record.get("kind")
    if kind is None and isinstance(record.get("summary"), dict) and "results" in record:
        kind = record["kind"] = "run"          # llama.cpp's SPEED-Bench output
    if kind not in kinds:
        raise OptionError(f"{path}: expected a {' or '.join(kinds)} file from specserve bench, got "
                          f"{kind or 'an unknown JSON object'}")
    record["path"] = str(path)
    return record


def label_of(record: dict) -> str:
    """The run's label (--label, else its speculative types), else the file name."""
    label = (record.get("config") or {}).get("label")
    return label or Path(record.get("path", "run")).stem


def is_speculative(record: dict) -> bool:
    config = record.get("config") or {}
    if config.get("spec_types") is not None:
        return bool(config["spec_types"])
    return bool(record["summary"].get("overall", {}).get("draft_n"))


def summary_text(record: dict) -> str:
    elapsed = record.get("elapsed")
    head = f"Summary (elapsed={elapsed:.2f}s)" if elapsed is not None else "Summary"
    lines = [head, text_table(SUMMARY_HEADERS, summary_rows(record["summary"]))]
    overall = record["summary"].get("overall", {})
    if overall.get("output_t_s") is not None:
        lines.append(f"output throughput: {overall['output_t_s']:.2f} tokens/s over the run")
    per_pos = overall.get("accept_rate_per_pos")
    if per_pos:
        shown = ", ".join(f"{r:.3f}" for r in per_pos[:16]) + (f", ... ({len(per_pos)} positions)"
                                                               if len(per_pos) > 16 else "")
        lines.append(f"acceptance per draft position: {shown}")
    failures = record.get("failures") or []
    if failures:
        lines.append(f"{len(failures)} failed sample(s):")
        lines += [f"  {f['category']}/{f['question_id']}: {f['error']}" for f in failures]
    return "\n".join(lines)
