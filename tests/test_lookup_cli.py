"""`specserve lookup create|merge|stats` and the n-gram options of `generate`, through the
command-line entry point (in process, plus one real subprocess)."""
import re
from types import SimpleNamespace

import pytest

from support.models import TRAINING_TEXT, write_tokenizer
from specserve.cli import main
from specserve.commands.lookup import simulate
from specserve.models.tokenizer import Tokenizer
from specserve.speculative.ngram_cache_store import NgramCache
from support.cli import run as run_subprocess


@pytest.fixture
def run(capsys, monkeypatch):
    def invoke(*args, env=None):
        for key, value in (env or {}).items():
            monkeypatch.setenv(key, value)
        code = main(list(args))
        captured = capsys.readouterr()
        return SimpleNamespace(returncode=code, stdout=captured.out, stderr=captured.err)
    return invoke

TEXT = "".join(TRAINING_TEXT[:12])
READ = TEXT.removesuffix("\n")          # what -f reads: llama.cpp drops one trailing newline of the file


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("lookup")
    write_tokenizer(root / "tok")
    (root / "text.txt").write_text(TEXT, encoding="utf-8")
    (root / "other.txt").write_text("for i in range(10):\n    print(i, i * i)\n" * 5, encoding="utf-8")
    return root


@pytest.mark.slow
def test_create_builds_the_static_cache(corpus):
    out = corpus / "static.bin"
    r = run_subprocess("lookup", "create", "-m", str(corpus / "tok"), "-f", str(corpus / "text.txt"), "-lcs", str(out))
    assert r.returncode == 0, r.stderr
    assert f"writing file to {out}" in r.stderr
    assert TEXT.endswith("\n")
    tokens = Tokenizer(corpus / "tok").encode(READ)
    expected = NgramCache()
    expected.update(tokens, 2, 2, len(tokens))
    assert out.read_bytes() == expected.to_bytes("libstdc++")          # llama-lookup-create's order
    assert all(ngram[2:] == (-1, -1) for ngram in NgramCache.load(out).table)


def test_merge_sums_counts(corpus, run):
    a, b, merged = corpus / "a.bin", corpus / "b.bin", corpus / "merged.bin"
    for path, text in ((a, "text.txt"), (b, "other.txt")):
        assert run("lookup", "create", "-m", str(corpus / "tok"), "-f", str(corpus / text),
                   "-lcs", str(path)).returncode == 0
    r = run("lookup", "merge", str(a), str(b), str(merged))
    assert r.returncode == 0, r.stderr
    ca, cb, cm = NgramCache.load(a), NgramCache.load(b), NgramCache.load(merged)
    for ngram in set(ca.table) | set(cb.table):
        pa, pb = ca.table.get(ngram, {}), cb.table.get(ngram, {})
        assert cm.table[ngram] == {t: pa.get(t, 0) + pb.get(t, 0) for t in set(pa) | set(pb)}
    r = run("lookup", "merge", str(a))
    assert r.returncode == 1 and "at least one input and the output" in r.stderr


def test_stats_prints_llama_lookup_stats_block(corpus, run):
    static = corpus / "stats-static.bin"
    assert run("lookup", "create", "-m", str(corpus / "tok"), "-f", str(corpus / "other.txt"),
               "-lcs", str(static)).returncode == 0
    r = run("lookup", "stats", "-m", str(corpus / "tok"), "-f", str(corpus / "text.txt"), "-lcs", str(static),
            "-c", "64", "--draft-max", "4")
    assert r.returncode == 0, r.stderr
    tokens = Tokenizer(corpus / "tok").encode(READ)
    want = simulate(tokens, 64, 4, NgramCache(), NgramCache.load(static))
    assert want["n_accept"] > 0
    values = dict(re.findall(r"^(\w+)\s+= (\S+)", r.stdout, flags=re.M))
    assert values["n_draft"] == "4" and values["n_predict"] == str(len(tokens) - len(tokens) % 64)
    assert values["n_drafted"] == str(want["n_drafted"]) and values["n_accept"] == str(want["n_accept"])
    assert values["accept"] == f"{100 * want['n_accept'] / want['n_drafted']:.3f}%"
    assert re.search(r"^t_draft      = [\d.]+ ms, [\d.]+ us per token, [\d.]+ tokens per second$", r.stdout, re.M)


def test_lookup_errors(corpus, run):
    r = run("lookup", "stats", "-m", str(corpus / "tok"), "-f", str(corpus / "text.txt"),
            "-lcs", str(corpus / "missing.bin"))
    assert r.returncode == 1 and "static lookup cache file not found" in r.stderr
    r = run("lookup", "stats", "-m", str(corpus / "tok"), "-p", "def f(): pass", "-c", "64")
    assert r.returncode == 1 and "needs more than one chunk" in r.stderr
    r = run("lookup", "create", "-m", str(corpus / "tok"), "-f", str(corpus / "nope.txt"), "-lcs", "x.bin")
    assert r.returncode == 1 and "text file not found" in r.stderr
    r = run("lookup", "create", "-m", str(corpus / "missing-model"), "-p", "x", "-lcs", str(corpus / "x.bin"))
    assert r.returncode == 1 and "tokenizer.json not found" in r.stderr


def test_generate_with_ngram_options(tiny_qwen3, tmp_path, run):
    r = run("generate", "-m", str(tiny_qwen3), "-p", "def add(a, b):", "-n", "16", "--temp", "0", "--ignore-eos",
            "--spec-default", "--spec-ngram-mod-n-match", "2", "--spec-ngram-mod-n-min", "1")
    assert r.returncode == 0, r.stderr
    assert "statistics        ngram-mod: #calls(b,g,a) =    1" in r.stderr
    r = run("generate", "-m", str(tiny_qwen3), "-p", "x", "-n", "4", "--spec-type", "ngram-cache",
            "-lcs", str(tmp_path / "missing.bin"))
    assert r.returncode == 1 and "--lookup-cache-static) file not found" in r.stderr
    r = run("generate", "-m", str(tiny_qwen3), "-p", "x", "-n", "4", "--spec-type", "ngram-mod",
            "--spec-ngram-mod-n-max", "0")
    assert r.returncode == 1 and "--spec-ngram-mod-n-max must be in 1..1024" in r.stderr
    r = run("generate", "-m", str(tiny_qwen3), "-p", "for i in range(10):", "-n", "12", "--temp", "0",
            "--ignore-eos", "--spec-type", "ngram-map-k4v,ngram-map-k,ngram-cache",
            "--spec-ngram-map-k-size-n", "2", "--spec-ngram-map-k4v-size-n", "2",
            env={"LLAMA_ARG_SPEC_NGRAM_MAP_K_SIZE_M": "4"})
    assert r.returncode == 0, r.stderr
    names = re.findall(r"statistics\s+(\S+):", r.stderr)
    assert names == ["ngram-map-k", "ngram-map-k4v", "ngram-cache"]
