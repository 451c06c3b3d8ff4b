"""specserve against golden data from the real llama.cpp (tests/data/llamacpp_golden.json, written by
scripts/llamacpp_golden.py): one session of eight requests per spec type, replayed here on one engine
with one slot, must give llama-server's text and its draft counters (`timings.draft_n`,
`draft_n_accepted`) request by request; the n-gram types with per-slot state are replayed on two
slots too, where each request must also take llama-server's slot. The n-gram types run with the options that restore
llama.cpp's behaviour where specserve's default differs; the last test shows that those defaults do
better on the same session.

A model drafter's choice between two candidates whose probabilities llama.cpp logged within
GOLDEN["near_tie"] of each other is numerical noise (ggml's float32 sums and specserve's differ in the
last bits); where specserve takes the other candidate, that request's drafts and counters may differ
from there on, and the file's record of llama.cpp's drafts and near-ties must show exactly that.
No llama.cpp is needed here. Regenerate the file when behaviour changes on purpose."""
import hashlib
import json
from pathlib import Path

import pytest

from specserve import LLM, SamplingParams
from specserve.bench.samples import load_bundled
from specserve.bundled import BUNDLED_DIR
from specserve.engine.request import Request
from specserve.llm import BUNDLED_MODEL
from specserve.models.tokenizer import Tokenizer
from specserve.speculative.ngram_cache_store import NgramCache

GOLDEN = json.loads((Path(__file__).parent / "data" / "llamacpp_golden.json").read_text())
CONFIGS = {c["name"]: c for c in GOLDEN["configs"]}
SESSION = GOLDEN["session"]


@pytest.fixture(scope="module")
def static_cache(tmp_path_factory) -> Path:
    """The static cache `specserve lookup create` writes from the text llama-lookup-create read."""
    from specserve.cli import main
    folder = tmp_path_factory.mktemp("lookup")
    corpus = folder / "corpus.txt"
    corpus.write_text("\n".join(t for s in load_bundled(GOLDEN["prompt_set"]) for t in s.turns), encoding="utf-8")
    path = folder / "static.bin"
    assert main(["lookup", "create", "-f", str(corpus), "-lcs", str(path)]) == 0
    return path


def replay(spec_type: str, drafter: str | None, options: dict, slots: int = 1) -> list[dict]:
    """The session on one engine, one request after another: per request, the output, the slot it took,
    the draft counters and the drafts the method made (before the caller's cap cuts them)."""
    draft_model = BUNDLED_DIR / drafter if drafter else None
    llm = LLM(None, draft_model=draft_model, spec_type=spec_type, n_parallel=slots,
              ctx_size=int(GOLDEN["server_args"][GOLDEN["server_args"].index("-c") + 1]), dtype="float32", **options)
    proposer = llm.engine.driver.proposers[0]
    drafting, drafts = proposer.draft, []

    def draft_and_keep(requests):               # the real method; its drafts are kept for the comparison
        made = drafting(requests)
        drafts.extend(d.tokens for d in made.values())
        return made

    proposer.draft = draft_and_keep
    request = GOLDEN["request"]
    params = SamplingParams(temperature=request["temperature"], max_tokens=request["n_predict"],
                            ignore_eos=request["ignore_eos"])
    got = []
    for i, entry in enumerate(SESSION):
        drafts.clear()
        request = Request(f"golden-{i}", entry["prompt_tokens"], params)
        out = llm.service.run([request])[0]
        got.append({"text": out.text, "tokens": out.token_ids, "id_slot": request.slot,
                    "draft_n": out.timings.get("draft_n", 0),
                    "draft_n_accepted": out.timings.get("draft_n_accepted", 0), "drafts": list(drafts)})
    return got


def first_difference(ours: list[list[int]], theirs: list[list[int]]) -> tuple[int, int] | None:
    """(draft, position) of the first token where two sequences of drafts differ, comparing each pair of
    drafts over their common length (the caller's cap cuts drafts near the end, after drafting)."""
    for d, (a, b) in enumerate(zip(ours, theirs)):
        for i, (x, y) in enumerate(zip(a, b)):
            if x != y:
                return d, i
    return None


def expected_of(config: dict) -> list[dict]:
    """llama-server's per-request records, with the session's text where it recorded none of its own."""
    return [{"text": r.get("text", s["text"]), "tokens": r.get("tokens", s["tokens"]), "draft_n": r["draft_n"],
             "draft_n_accepted": r["draft_n_accepted"]} for r, s in zip(config["requests"], SESSION)]


def options_of(config: dict, static_cache: Path) -> dict:
    placeholder = GOLDEN["static_cache"]["placeholder"]
    return {k: str(static_cache) if v == placeholder else v for k, v in config["specserve"]["options"].items()}


def test_golden_file_covers_every_type_and_request():
    assert GOLDEN["llama_cpp"].startswith("version:") and len(SESSION) == 8
    types = {c["specserve"]["spec_type"] for c in CONFIGS.values()}
    assert types == {"ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache", "draft-simple",
                     "draft-dflash", "draft-dspark"}
    assert all(len(c["requests"]) == len(SESSION) for c in CONFIGS.values())
    # drafting happened in every configuration, so the counters test something
    assert all(sum(r["draft_n_accepted"] for r in c["requests"]) > 0 for c in CONFIGS.values())


def test_tokenizer_matches_llama_cpp_on_the_session():
    tokenizer = Tokenizer(BUNDLED_MODEL)
    for entry in SESSION:
        assert tokenizer.encode(entry["prompt"]) == entry["prompt_tokens"], entry["question_id"]
        assert tokenizer.decode(entry["tokens"]) == entry["text"], entry["question_id"]


def test_lookup_create_writes_llama_lookup_create_bytes(static_cache):
    want = GOLDEN["static_cache"]
    assert len(NgramCache.load(static_cache)) == want["ngrams"]
    assert hashlib.sha256(static_cache.read_bytes()).hexdigest() == want["sha256"]


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CONFIGS))
def test_session_matches_llama_server(name, static_cache):
    config = CONFIGS[name]
    spec = config["specserve"]
    got = replay(spec["spec_type"], spec["drafter"], options_of(config, static_cache))
    want = expected_of(config)
    assert [g["text"] for g in got] == [w["text"] for w in want]
    assert [g["tokens"] for g in got] == [w["tokens"] for w in want]
    for r, (g, w, theirs) in enumerate(zip(got, want, config["requests"])):
        if (g["draft_n"], g["draft_n_accepted"]) == (w["draft_n"], w["draft_n_accepted"]):
            continue
        # only a model drafter may differ, and only from a choice llama.cpp itself made by a hair
        assert "drafts" in theirs, f"request {r}: counters {g['draft_n']}/{g['draft_n_accepted']}, " \
                                   f"llama.cpp {w['draft_n']}/{w['draft_n_accepted']}"
        where = first_difference(g["drafts"], theirs["drafts"])
        assert where is not None, f"request {r}: the drafts agree, the counters do not"
        d, i = where
        ties = {(t[0], t[1]): t for t in theirs["near_ties"]}
        assert where in ties, f"request {r}: draft {d} differs at position {i}, where llama.cpp had no near-tie"
        assert g["drafts"][d][i] == ties[where][4], f"request {r}: draft {d} position {i} is neither candidate"


TWO_SLOTS = [name for name, config in CONFIGS.items() if "requests_two_slots" in config]


@pytest.mark.slow
@pytest.mark.parametrize("name", TWO_SLOTS)
def test_two_slot_session_takes_llama_servers_slots(name, static_cache):
    config = CONFIGS[name]
    spec = config["specserve"]
    got = replay(spec["spec_type"], spec["drafter"], options_of(config, static_cache), slots=2)
    assert [g["text"] for g in got] == [s["text"] for s in SESSION]
    fields = ("id_slot", "draft_n", "draft_n_accepted")
    assert [tuple(g[f] for f in fields) for g in got] == \
        [tuple(r[f] for f in fields) for r in config["requests_two_slots"]]


# specserve's defaults where they differ from llama.cpp (docs/ngram.md): the option, and its default value
DEFAULTS = {"ngram-map-k": "spec_ngram_map_k_begin", "ngram-map-k4v n=2 m=3": "spec_ngram_map_k4v_begin",
            "ngram-cache": "spec_ngram_cache_context"}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(DEFAULTS))
def test_defaults_accept_more_than_llama_cpp_on_the_session(name, static_cache):
    """The first request agrees (nothing carried over yet); over the session, the default accepts more."""
    config = CONFIGS[name]
    spec = config["specserve"]
    options = options_of(config, static_cache)
    del options[DEFAULTS[name]]
    got = replay(spec["spec_type"], spec["drafter"], options)
    want = expected_of(config)
    assert [g["text"] for g in got] == [w["text"] for w in want]
    assert (got[0]["draft_n"], got[0]["draft_n_accepted"]) == (want[0]["draft_n"], want[0]["draft_n_accepted"])
    assert sum(g["draft_n_accepted"] for g in got) > sum(w["draft_n_accepted"] for w in want)
