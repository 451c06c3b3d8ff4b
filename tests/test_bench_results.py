"""Bench figures from the response shapes of other servers (vLLM, llama-server), the per-sample
and per-category arithmetic, and compare on files written by llama.cpp's SPEED-Bench client."""
from __future__ import annotations

import json

import pytest

from specserve.bench.compare import compare
from specserve.bench.records import load_record
from specserve.bench.results import SampleResult, TurnResult, per_position_from_histogram, turn_from_response
from specserve.bench.runner import Workload
from specserve.bench.summary import percentile, summarise
from specserve.errors import OptionError


def test_vllm_response_without_timings():
    """vLLM: usage and metrics.speculative_decoding only; times come from the client's clock."""
    metrics = {"speculative_decoding": {"mean_acceptance_length": 2.0, "draft_acceptance_rate": 0.4,
                                        "acceptance_histogram": [2, 1, 0, 2], "num_spec_steps": 5,
                                        "num_accepted_draft_tokens": 7, "num_draft_tokens": 15,
                                        "num_spec_tokens": 3}}
    turn = turn_from_response("abc", {"prompt_tokens": 12, "completion_tokens": 20}, None, metrics, "length",
                              latency=1.5, ttft=0.5)
    assert (turn.prompt_tokens, turn.predicted_tokens) == (12, 20)
    assert (turn.prompt_ms, turn.predicted_ms) == (500.0, 1000.0)
    assert (turn.draft_n, turn.draft_n_accepted, turn.spec_steps) == (15, 7, 5)
    # steps accepting 1, 3, 3 drafts: position 1 accepted 3 times, positions 2 and 3 twice
    assert turn.accepted_per_pos == [3, 2, 2] and sum(turn.accepted_per_pos) == 7


def test_llama_server_response_without_usage():
    """llama-server's timings carry the counts and the drafted / accepted tokens."""
    timings = {"prompt_n": 10, "prompt_ms": 20.0, "predicted_n": 40, "predicted_ms": 400.0, "draft_n": 30,
               "draft_n_accepted": 24}
    turn = turn_from_response("x", None, timings, None, "stop", latency=0.5, ttft=None)
    assert (turn.prompt_tokens, turn.predicted_tokens, turn.prompt_ms, turn.predicted_ms) == (10, 40, 20.0, 400.0)
    assert (turn.draft_n, turn.draft_n_accepted, turn.spec_steps, turn.accepted_per_pos) == (30, 24, None, [])
    sample = SampleResult.from_turns("q", "c", [turn])
    assert sample.accept_rate == pytest.approx(0.8) and sample.mean_acceptance_length is None
    assert sample.pred_t_s == pytest.approx(100.0) and sample.prompt_t_s == pytest.approx(500.0)


def test_histogram_to_positions():
    assert per_position_from_histogram([5]) == []
    assert per_position_from_histogram([1, 0, 0, 4]) == [4, 4, 4]
    assert per_position_from_histogram([0, 2, 1]) == [3, 1]


def test_multi_turn_sample_and_failures():
    t1 = TurnResult(latency=1.0, ttft=0.1, prompt_tokens=10, predicted_tokens=50, prompt_ms=100, predicted_ms=900,
                    draft_n=20, draft_n_accepted=10, spec_steps=8, accepted_per_pos=[6, 4], text="a")
    t2 = TurnResult(latency=2.0, ttft=0.2, prompt_tokens=70, predicted_tokens=50, prompt_ms=100, predicted_ms=1100,
                    draft_n=10, draft_n_accepted=10, spec_steps=4, accepted_per_pos=[4, 3, 3], text="b")
    s = SampleResult.from_turns("q", "c", [t1, t2])
    assert s.success and s.turns == 2 and s.outputs == ["a", "b"] and s.latency == 3.0 and s.ttft == 0.1
    assert s.pred_t_s == pytest.approx(100 / 2.0) and s.prompt_t_s == pytest.approx(80 / 0.2)
    assert s.accepted_per_pos == [10, 7, 3] and s.mean_acceptance_length == pytest.approx(1 + 20 / 12)
    failed = SampleResult.from_turns("r", "c", [t1, TurnResult(latency=0.1, error="HTTP 500: boom")])
    assert not failed.success and failed.error == "HTTP 500: boom" and failed.turns == 1
    summary = summarise([s, failed], elapsed=4.0)
    c = summary["c"]
    assert (c["requests"], c["failed"], c["turns"]) == (2, 1, 2)
    assert c["avg_pred_t_s"] == s.pred_t_s and c["accept_rate"] == pytest.approx(20 / 30)
    assert c["accept_rate_per_pos"] == pytest.approx([10 / 12, 7 / 12, 3 / 12])
    assert summary["overall"]["output_t_s"] == pytest.approx(100 / 4.0)


def test_percentile_interpolates():
    assert percentile([3, 1, 2, 4], 50) == pytest.approx(2.5)
    assert percentile([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 90) == pytest.approx(9.1)
    assert percentile([], 50) is None


def test_request_body_order():
    body = Workload("chat", 64, {"temperature": 0, "max_tokens": 5, "stream_options": {"x": 1}}).body([{"a": 1}])
    assert body["max_tokens"] == 64 and body["stream"] is True                   # --osl wins
    assert body["stream_options"] == {"x": 1, "include_usage": True}
    plain = Workload("completion", 8, {"stream_options": {}}, stream=False).body("text")
    assert plain["prompt"] == "text" and "stream_options" not in plain and plain["stream"] is False


def llama_cpp_output(pred: dict[str, float], latency: dict[str, float], accept) -> dict:
    """The shape llama.cpp's speed_bench client writes (no `kind`, no acceptance length)."""
    summary = {c: {"requests": 2, "turns": 2, "failed": 0, "avg_prompt_t_s": 100.0, "avg_pred_t_s": pred[c],
                   "avg_latency": latency[c], "draft_n": 10 if accept else 0, "accepted": 7 if accept else 0,
                   "accept_rate": accept} for c in pred}
    return {"config": {"url": "http://localhost:8080/v1", "bench": "qualitative"}, "selected_samples": 4,
            "completed_samples": 4, "failed_samples": 0, "summary": summary, "results": []}


def test_compare_reads_llama_cpp_files(tmp_path):
    base = tmp_path / "base.json"
    spec = tmp_path / "spec.json"
    base.write_text(json.dumps(llama_cpp_output({"coding": 50.0, "overall": 40.0}, {"coding": 4.0, "overall": 5.0},
                                                None)))
    spec.write_text(json.dumps(llama_cpp_output({"coding": 80.0, "math": 1.0, "overall": 60.0},
                                                {"coding": 2.0, "math": 1.0, "overall": 4.0}, 0.7)))
    result = compare(load_record(base, ("run",)), [load_record(spec, ("run",))])
    assert [r["category"] for r in result["rows"]] == ["coding", "overall"]     # categories in common only
    coding = result["rows"][0]
    assert coding["decode_speedup"] == pytest.approx(1.6) and coding["latency_speedup"] == pytest.approx(2.0)
    assert coding["accept_rate"] == 0.7 and coding["mean_acceptance_length"] is None
    assert coding["same_output"] is None and result["baseline"] == "base" and result["runs"] == ["spec"]


def test_load_record_rejects_other_json(tmp_path):
    path = tmp_path / "other.json"
    path.write_text(json.dumps({"hello": 1}))
    with pytest.raises(OptionError, match="expected a run file"):
        load_record(path, ("run",))
    path.write_text("not json")
    with pytest.raises(OptionError, match="not a JSON file"):
        load_record(path)


def test_a_category_without_drafts_says_so(tmp_path):
    """A run that drafted nothing in a category shows "no drafts", not a noise speedup, and is never its best."""
    from specserve.bench.compare import best_per_category, compare_text
    rows = [{"category": "c", "run": "quiet", "base_pred_t_s": 100.0, "spec_pred_t_s": 104.0, "decode_speedup": 1.04,
             "latency_speedup": 1.03, "accept_rate": None, "mean_acceptance_length": None, "same_output": 2,
             "samples_compared": 2, "drafted": 0},
            {"category": "c", "run": "busy", "base_pred_t_s": 100.0, "spec_pred_t_s": 101.0, "decode_speedup": 1.01,
             "latency_speedup": 1.01, "accept_rate": 0.5, "mean_acceptance_length": 1.5, "same_output": 2,
             "samples_compared": 2, "drafted": 10}]
    best = best_per_category(rows)
    assert [r["run"] for r in best] == ["busy"]
    text = compare_text({"baseline": "none", "runs": ["quiet", "busy"], "rows": rows, "best": best})
    assert "no drafts" in text and "1.04x" not in text and "1.01x" in text
