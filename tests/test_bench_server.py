"""`specserve bench` against real `specserve serve` processes on loopback, serving the bundled
model: run, sweep, compare, report, failures, and the in-process mode giving the same figures."""
from __future__ import annotations

import contextlib
import io
import json

import numpy as np
import pytest
from matplotlib import image as mpimg

from support.server import ServerProcess, free_port, running
from specserve.bundled import STDLIB_CODER
from specserve.cli import main

pytestmark = pytest.mark.server

KEY = "bench-key"
GREEDY = '{"temperature": 0}'
# code editing and multi-turn prompts make the bundled model repeat text, so n-gram drafts happen
WORKLOAD = ["--category", "code_editing,multi_turn", "--limit", "1", "--osl", "48", "--concurrency", "2",
            "--extra-inputs", GREEDY, "--no-progress"]


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    logs = tmp_path_factory.mktemp("bench_servers")
    procs = {
        "none": ServerProcess(STDLIB_CODER, logs / "none.log", "-np", "2", "--threads", "1", api_key=KEY),
        "ngram-simple": ServerProcess(STDLIB_CODER, logs / "spec.log", "-np", "2", "--threads", "1",
                                      "--spec-type", "ngram-simple"),
    }
    with running(procs):
        yield procs


def bench(capsys, *args) -> tuple[int, str]:
    capsys.readouterr()
    rc = main(["bench", *map(str, args)])
    return rc, capsys.readouterr().out


@pytest.fixture(scope="module")
def runs(servers, tmp_path_factory):
    """The baseline and ngram-simple runs' JSON files, and what the commands printed
    (capsys is per test, so this module-wide fixture captures stdout itself)."""
    out = tmp_path_factory.mktemp("bench_runs")
    files, printed = {}, {}
    for name, proc in servers.items():
        files[name] = out / f"{name}.json"
        buffer = io.StringIO()
        key = ["--api-key", KEY] if proc.api_key else []
        with contextlib.redirect_stdout(buffer):
            rc = main(["bench", "run", "--url", proc.url.removeprefix("http://"), *key, *WORKLOAD,
                       "--output", str(files[name])])
        assert rc == 0, buffer.getvalue()
        printed[name] = buffer.getvalue()
    return files, printed


def load(path) -> dict:
    return json.loads(path.read_text())


def test_run_prints_the_summary_and_writes_json(runs):
    files, printed = runs
    for name in ("none", "ngram-simple"):
        text = printed[name]
        assert "Summary (elapsed=" in text
        for column in ("category", "requests", "failed", "avg_prompt_t/s", "avg_pred_t/s", "avg_latency",
                       "avg_ttft", "accept_rate", "mean_acc_len"):
            assert column in text
        record = load(files[name])
        assert record["kind"] == "run" and record["config"]["osl"] == 48 and record["config"]["concurrency"] == 2
        assert record["config"]["extra_inputs"] == {"temperature": 0}
        assert record["selected_samples"] == record["completed_samples"] == 2 and record["failed_samples"] == 0
        assert list(record["summary"]) == ["code_editing", "multi_turn", "overall"]
        for sample in record["results"]:
            assert sample["success"] and sample["error"] is None
            assert sample["latency"] > 0 and sample["ttft"] > 0
            assert sample["prompt_tokens"] > 0 and sample["predicted_tokens"] > 0
            assert sample["prompt_t_s"] > 0 and sample["pred_t_s"] > 0
            assert len(sample["outputs"]) == sample["turns"] == len(sample["turn_results"])
        multi = next(s for s in record["results"] if s["category"] == "multi_turn")
        assert multi["turns"] == 2
        # the second turn's prompt holds the first turn and its reply
        assert multi["turn_results"][1]["prompt_tokens"] > multi["turn_results"][0]["prompt_tokens"] + \
            multi["turn_results"][0]["predicted_tokens"]
        overall = record["summary"]["overall"]
        assert overall["avg_pred_t_s"] > 0 and overall["avg_latency"] > 0 and overall["output_t_s"] > 0
        assert overall["predicted_tokens"] == sum(s["predicted_tokens"] for s in record["results"])


def test_spec_run_reports_acceptance(runs):
    files, printed = runs
    base, spec = load(files["none"]), load(files["ngram-simple"])
    assert base["config"]["label"] == "none" and base["config"]["spec_types"] == []
    assert spec["config"]["label"] == "ngram-simple" and spec["config"]["spec_types"] == ["ngram-simple"]
    assert base["summary"]["overall"]["draft_n"] == 0 and base["summary"]["overall"]["accept_rate"] is None
    overall = spec["summary"]["overall"]
    assert overall["draft_n"] > 0 and 0 < overall["accepted"] <= overall["draft_n"]
    assert overall["accept_rate"] == pytest.approx(overall["accepted"] / overall["draft_n"])
    assert overall["mean_acceptance_length"] == pytest.approx(1 + overall["accepted"] / overall["spec_steps"])
    rates = overall["accept_rate_per_pos"]
    assert rates and all(a >= b for a, b in zip(rates, rates[1:])) and 0 < rates[0] <= 1
    assert sum(rates) * overall["spec_steps"] == pytest.approx(overall["accepted"])
    assert "acceptance per draft position:" in printed["ngram-simple"]
    # greedy speculation is lossless: every turn's text is the baseline's
    assert [s["outputs"] for s in spec["results"]] == [s["outputs"] for s in base["results"]]


def test_compare_table_and_json(runs, capsys, tmp_path):
    files, _ = runs
    rc, text = bench(capsys, "compare", files["none"], files["ngram-simple"], "--json", tmp_path / "c.json")
    assert rc == 0
    assert "Speedup over the baseline (none)" in text and "decode_speedup" in text and "latency_speedup" in text
    result = load(tmp_path / "c.json")
    assert result["kind"] == "compare" and result["runs"] == ["ngram-simple"]
    base, spec = load(files["none"])["summary"], load(files["ngram-simple"])["summary"]
    assert [r["category"] for r in result["rows"]] == ["code_editing", "multi_turn", "overall"]
    for row in result["rows"]:
        c = row["category"]
        assert row["decode_speedup"] == pytest.approx(spec[c]["avg_pred_t_s"] / base[c]["avg_pred_t_s"])
        assert row["latency_speedup"] == pytest.approx(base[c]["avg_latency"] / spec[c]["avg_latency"])
        assert row["mean_acceptance_length"] == spec[c]["mean_acceptance_length"]
        assert row["same_output"] == row["samples_compared"] >= 1
        assert f"{row['decode_speedup']:.2f}x" in text if row["drafted"] else "no drafts" in text


def check_png(path):
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    pixels = mpimg.imread(path)
    assert pixels.ndim == 3 and pixels.shape[0] > 200 and pixels.shape[1] > 300
    assert np.std(pixels[..., :3]) > 0.01          # a chart, not a blank canvas


def test_sweep_and_report(servers, runs, capsys, tmp_path):
    files, _ = runs
    proc = servers["ngram-simple"]
    rc, text = bench(capsys, "sweep", "--url", proc.url, "--levels", "1,2", "--category", "coding,qa", "--limit", "1",
                     "--osl", "16", "--no-progress", "--output", tmp_path / "sweep.json")
    assert rc == 0 and "Concurrency sweep" in text and "output_t/s" in text
    sweep = load(tmp_path / "sweep.json")
    assert sweep["kind"] == "sweep" and [lv["concurrency"] for lv in sweep["levels"]] == [1, 2]
    for level in sweep["levels"]:
        assert level["requests"] == 2 and level["failed"] == 0 and level["output_t_s"] > 0
        assert 0 < level["latency_p50"] <= level["latency_p90"] and level["ttft_mean"] > 0

    rc, text = bench(capsys, "report", files["none"], files["ngram-simple"], tmp_path / "sweep.json",
                     "--out", tmp_path / "report")
    assert rc == 0
    report = (tmp_path / "report" / "report.md").read_text()
    pngs = sorted(p.name for p in (tmp_path / "report").glob("*.png"))
    assert pngs == ["acceptance_length_per_category.png", "acceptance_per_position.png",
                    "speedup_per_category.png", "throughput_vs_concurrency.png"]
    for name in pngs:
        check_png(tmp_path / "report" / name)
        assert f"]({name})" in report
    assert "| category | run | base_pred_t/s |" in report and "| concurrency |" in report
    assert "### ngram-simple" in report and "### none" in report


def test_failed_requests_are_counted(servers, capsys, tmp_path):
    rows = [{"question_id": "short", "category": "a", "turns": ["def add(a, b):\n"]},
            {"question_id": "too-long", "category": "a", "turns": ["x = 1\n" * 900]}]
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    proc = servers["ngram-simple"]
    rc, text = bench(capsys, "run", "--url", proc.url, "--bench-file", path, "--osl", "8", "--no-progress",
                     "--output", tmp_path / "run.json")
    record = load(tmp_path / "run.json")
    assert rc == 1 and record["failed_samples"] == 1 and record["completed_samples"] == 1
    assert record["summary"]["a"]["failed"] == 1 and record["summary"]["a"]["requests"] == 2
    failure = record["failures"][0]
    assert failure["question_id"] == "too-long" and "HTTP 400" in failure["error"] and "context" in failure["error"]
    assert "1 failed sample(s)" in text and "a/too-long: HTTP 400" in text

    # a wrong API key: every request fails with the server's 401
    rc, text = bench(capsys, "run", "--url", servers["none"].url, "--api-key", "wrong", "--category", "qa",
                     "--limit", "2", "--osl", "8", "--no-progress")
    assert rc == 1 and "2 failed sample(s)" in text and "HTTP 401" in text

    # nothing listening: connection errors, counted per sample
    rc, text = bench(capsys, "run", "--url", f"127.0.0.1:{free_port()}", "--category", "qa,math", "--limit", "1",
                     "--osl", "8", "--no-progress", "--output", tmp_path / "down.json")
    down = load(tmp_path / "down.json")
    assert rc == 1 and down["failed_samples"] == 2 and down["completed_samples"] == 0
    assert all("Connect" in f["error"] for f in down["failures"])


def test_completion_endpoint_and_no_stream(servers, capsys, tmp_path):
    proc = servers["ngram-simple"]
    rc, _ = bench(capsys, "run", "--url", proc.url, "--endpoint", "completion", "--category", "multi_turn",
                  "--limit", "1", "--osl", "16", "--no-progress", "--extra-inputs", GREEDY,
                  "--output", tmp_path / "completion.json")
    sample = load(tmp_path / "completion.json")["results"][0]
    assert rc == 0 and sample["turns"] == 2 and sample["predicted_tokens"] > 0 and sample["ttft"] > 0
    rc, _ = bench(capsys, "run", "--url", proc.url, "--no-stream", "--category", "qa", "--limit", "1",
                  "--osl", "16", "--no-progress", "--output", tmp_path / "plain.json")
    sample = load(tmp_path / "plain.json")["results"][0]
    assert rc == 0 and sample["ttft"] is None and sample["predicted_tokens"] > 0 and sample["pred_t_s"] > 0


def test_in_process_mode_matches_the_server(runs, capsys, tmp_path):
    files, _ = runs
    rc, text = bench(capsys, "run", "--model-dir", STDLIB_CODER, "--spec-type", "ngram-simple", "-t", "1",
                     *WORKLOAD, "--output", tmp_path / "local.json")
    assert rc == 0 and "Summary (elapsed=" in text
    local, served = load(tmp_path / "local.json"), load(files["ngram-simple"])
    assert local["config"]["label"] == "ngram-simple" and local["config"]["model_dir"] == str(STDLIB_CODER)
    assert local["config"]["server_slots"] == 2          # -np follows --concurrency
    assert set(local) == set(served) and set(local["summary"]["overall"]) == set(served["summary"]["overall"])
    assert set(local["results"][0]) == set(served["results"][0])
    for mine, theirs in zip(local["results"], served["results"]):
        assert mine["outputs"] == theirs["outputs"]
        assert (mine["draft_n"], mine["draft_n_accepted"], mine["spec_steps"]) == \
            (theirs["draft_n"], theirs["draft_n_accepted"], theirs["spec_steps"])
        assert mine["ttft"] > 0 and mine["pred_t_s"] > 0


def test_bench_command_errors(capsys, tmp_path):
    for args, message in [
        (["run", "--limit", "1"], "exactly one of --url"),
        (["run", "--url", "x", "--model-dir", "y"], "exactly one of --url"),
        (["run", "--url", "x", "--extra-inputs", "{nope"], "--extra-inputs is not valid JSON"),
        (["run", "--url", "x", "--extra-inputs", "[1]"], "must be a JSON object"),
        (["run", "--url", "x", "--category", "poetry"], "unknown category 'poetry'"),
        (["sweep", "--url", "x", "--levels", "1,a"], "--levels must be comma-separated"),
        (["compare", str(tmp_path / "missing.json"), str(tmp_path / "missing.json")], "file not found"),
    ]:
        rc = main(["bench", *args])
        assert rc == 1 and message in capsys.readouterr().err, args


def test_in_process_sweep(capsys, tmp_path):
    rc, text = bench(capsys, "sweep", "--model-dir", STDLIB_CODER, "-t", "1", "--levels", "1,2", "--category", "qa",
                     "--limit", "2", "--osl", "8", "--no-progress", "--output", tmp_path / "sweep.json")
    sweep = load(tmp_path / "sweep.json")
    assert rc == 0 and "Concurrency sweep" in text
    assert sweep["config"]["server_slots"] == 2 and sweep["config"]["levels"] == [1, 2]   # -np = the largest level
    assert [lv["requests"] for lv in sweep["levels"]] == [2, 2] and all(lv["output_t_s"] > 0 for lv in sweep["levels"])
