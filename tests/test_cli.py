"""`specserve generate` as a user runs it: a real subprocess."""
import json

import pytest

from support.cli import run

pytestmark = pytest.mark.slow


def test_generate_text_and_statistics(tiny_qwen3):
    r = run("generate", "-m", str(tiny_qwen3), "-p", "def add(a, b):", "-n", "24", "--temp", "0",
            "--ignore-eos", "--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "2",
            "--spec-ngram-simple-size-m", "4")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("def add(a, b):")
    assert "prompt eval time =" in r.stderr and "eval time =" in r.stderr
    assert "statistics     ngram-simple: #calls(b,g,a) =    1" in r.stderr


def test_json_output_and_environment_variables(tiny_qwen3):
    r = run("generate", "-m", str(tiny_qwen3), "-p", "for i in", "--temp", "0", "--json",
            env={"LLAMA_ARG_N_PREDICT": "7", "LLAMA_ARG_SPEC_TYPE": "ngram-simple", "LLAMA_ARG_IGNORE_EOS": "1"})
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert len(out["token_ids"]) == 7 and out["finish_reason"] == "length"
    assert set(out["timings"]) >= {"prompt_n", "prompt_ms", "predicted_n", "predicted_ms", "predicted_per_second"}
    assert "ngram-simple" in out["spec_statistics"]
    # the command line wins over the environment
    r = run("generate", "-m", str(tiny_qwen3), "-p", "x", "--temp", "0", "--json", "-n", "3", "--ignore-eos",
            env={"LLAMA_ARG_N_PREDICT": "7"})
    assert len(json.loads(r.stdout)["token_ids"]) == 3


def test_clear_errors(tiny_qwen3, tmp_path):
    r = run("generate", "-m", str(tiny_qwen3), "-p", "x", "--spec-type", "draft-magic")
    assert r.returncode == 1 and ("unknown spec type(s) 'draft-magic'; valid types: none, ngram-simple, "
                                  "ngram-map-k, ngram-map-k4v, ngram-mod, ngram-cache") in r.stderr
    r = run("generate", "-m", str(tmp_path / "missing"), "-p", "x")
    assert r.returncode == 1 and "model directory not found" in r.stderr
    r = run("generate", "-m", str(tiny_qwen3), "-p", "x", "--no-such-flag")
    assert r.returncode == 2 and "unrecognized arguments: --no-such-flag" in r.stderr
    r = run("generate", "-m", str(tiny_qwen3), "-p", "x " * 600, "-c", "64")
    assert r.returncode == 1 and "context size is 64" in r.stderr
    r = run("generate", "-m", str(tiny_qwen3), "-p", "x", env={"LLAMA_ARG_N_PREDICT": "many"})
    assert r.returncode == 2 and "LLAMA_ARG_N_PREDICT" in r.stderr
