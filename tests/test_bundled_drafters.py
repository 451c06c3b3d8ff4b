"""The drafters shipped for the bundled model: each loads, drafts, gets whole runs of drafts
accepted, keeps greedy output identical in a batch, and the demo runs them all by default; the block
drafters' records say how they were trained and what they reached."""
import argparse
import json

import pytest

from specserve import LLM, SamplingParams
from specserve import kernels
from specserve.bundled import (AMX_N_MAX, AVX512_N_MAX_SAMPLED, CHAIN_DRAFTERS, NO_AMX_DRAFT_VOCAB,
                               NO_AMX_N_MAX_SAMPLED, NO_INT8_DOT_QUANT, STDLIB_CODER, STDLIB_CODER_DRAFTERS,
                               served_options, shipped_drafters)
from specserve.commands.demo import default_spec_types
from specserve.errors import OptionError
from specserve.llm import BUNDLED_MODEL
from specserve.options import add_engine_options, command_line
from specserve.speculative.draft_vocab import kept_token_ids
from specserve.speculative.registry import draftless_types
from support.cli import run

PROMPTS = ["def parse_header(line):\n    \"\"\"Parse a header line.\"\"\"\n", "class Stack:\n    def __init__(self):\n"]


@pytest.fixture(scope="module")
def baseline():
    llm = LLM(BUNDLED_MODEL)
    return [o.token_ids for o in llm.generate(PROMPTS, SamplingParams(temperature=0, max_tokens=48, ignore_eos=True))]


def test_every_drafter_is_shipped():
    assert set(shipped_drafters()) == set(STDLIB_CODER_DRAFTERS)


def test_bundled_token_ranking_ranks_the_whole_vocabulary():
    """--spec-draft-vocab's default ranking: every token once, the most frequent (code's indentation and
    punctuation) first."""
    ranking = json.loads((STDLIB_CODER / "token_ranking.json").read_text())
    vocab = json.loads((STDLIB_CODER / "config.json").read_text())["vocab_size"]
    assert len(kept_token_ids(STDLIB_CODER / "token_ranking.json", vocab, vocab)) == vocab
    assert ranking["counts"] == sorted(ranking["counts"], reverse=True) and ranking["counts"][2047] > 0


def test_shipped_drafter_weights_stay_small():
    """Every version of a shipped file stays in the repository's history: about 6 MB each at most."""
    for folder, _ in STDLIB_CODER_DRAFTERS.values():
        assert (folder / "model.safetensors").stat().st_size < 6.5e6, folder.name


@pytest.mark.parametrize("spec_type", list(STDLIB_CODER_DRAFTERS))
@pytest.mark.parametrize("quant", ["served", None])
def test_bundled_drafter_is_accepted_and_lossless(baseline, spec_type, quant):
    """As served (q8 with int8 dot products, else int8 weights for the chain drafters) and in bfloat16."""
    folder, n_max = STDLIB_CODER_DRAFTERS[spec_type]
    amx = kernels.mode() == "native" and kernels.has_amx()
    n_max, n_sampled = AMX_N_MAX[spec_type] if amx else (n_max, n_max)    # with AMX rows cost little at T=0
    vocab = 0
    if kernels.mode() == "native" and not amx:      # without AMX every verified row costs
        vocab = NO_AMX_DRAFT_VOCAB.get(spec_type, 0)
        n_sampled = AVX512_N_MAX_SAMPLED.get(spec_type, NO_AMX_N_MAX_SAMPLED) if kernels.has_bf16_dot() \
            else NO_AMX_N_MAX_SAMPLED
    options = served_options(spec_type) if quant == "served" else {"spec_draft_n_max": n_max}
    assert options["spec_draft_n_max"] == n_max
    assert options.get("spec_draft_n_max_sampled", n_max) == (n_sampled if quant == "served" else n_max)
    q8 = kernels.mode() == "native" and kernels.has_int8_dot()
    assert options.get("quant_draft") == (("q8" if q8 else NO_INT8_DOT_QUANT.get(spec_type)) if quant else None)
    assert options.get("spec_draft_vocab", 0) == (vocab if quant else 0)
    # the chains' drafts for sampled requests are sampled from the request's sampler, where there are any
    assert options.get("spec_draft_sample", False) == bool(quant and spec_type in CHAIN_DRAFTERS and n_sampled)
    llm = LLM(BUNDLED_MODEL, draft_model=folder, spec_type=spec_type, n_parallel=2, **options)
    assert llm.engine.driver.max_draft() == n_max
    outs = llm.generate(PROMPTS, SamplingParams(temperature=0, max_tokens=48, ignore_eos=True))
    assert [o.token_ids for o in outs] == baseline
    stats = llm.engine.driver.stats_dict()[spec_type]
    assert stats["n_gen_tokens"] > 0 and stats["n_acc_tokens"] > 0
    assert 1 + stats["n_acc_tokens"] / stats["n_call_accept"] > 1.3      # runs of drafts are accepted


@pytest.mark.slow
@pytest.mark.parametrize("spec_type", sorted(STDLIB_CODER_DRAFTERS))
def test_served_options_read_back_from_their_command_line(spec_type):
    """What a shipped drafter is served with, as `specserve serve` arguments (the server benchmark starts its
    servers so), parses back to the same values; an option with no flag is an error."""
    parser = argparse.ArgumentParser()
    add_engine_options(parser)
    options = served_options(spec_type)
    parsed = vars(parser.parse_args(command_line({**options, "spec_schedule": True})))
    assert {k: parsed[k] for k in options} == options and parsed["spec_schedule"] is True
    assert command_line({"spec_schedule": False}) == []
    with pytest.raises(OptionError, match="not_an_option"):
        command_line({"not_an_option": 1})


def test_demo_compares_every_spec_type():
    draftless = draftless_types()
    runs = draftless + list(STDLIB_CODER_DRAFTERS) + ["ngram-mod+draft-dspark"]
    assert default_spec_types().split(",") == runs
    r = run("demo", "-n", "24", "--set-tokens", "8")
    assert r.returncode == 0, r.stderr
    assert "The bundled model is a toy" in r.stdout and "-t 1" in r.stdout
    assert "then 8 prompts of the bundled 'qualitative' set, 8 tokens each" in r.stdout
    assert "ngram-mod (llama.cpp's defaults) for greedy requests; then draft-dspark (drafter stdlib-coder-dspark" in r.stdout
    for name in runs:
        line = next(line for line in r.stdout.splitlines() if line.startswith(name + " "))
        assert "output identical to baseline: yes" in line and "over the set" in line, line


def test_block_drafter_cards_record_training_and_held_out_acceptance():
    """DSpark and DFlash were trained on the same data with the same budget; the records say so, each
    card states data, steps, time and per-position acceptance at T=0 and T=1, and DSpark's held-out
    acceptance length is at least 1.15x DFlash's at both temperatures (the DSpark paper's claim)."""
    records = {}
    for spec_type in ("draft-dflash", "draft-dspark"):
        folder = STDLIB_CODER_DRAFTERS[spec_type][0]
        records[spec_type] = json.loads((folder / "training.json").read_text())
        card = (folder / "README.md").read_text()
        for needed in ("training data", "steps", "minutes", "T=0 (", "T=1 (", "Command:"):
            assert needed in card, (spec_type, needed)
    dflash, dspark = records["draft-dflash"], records["draft-dspark"]
    for key in ("steps", "batch_size", "max_len", "anchors", "block_size", "num_layers", "data_path", "seed"):
        assert dflash["config"][key] == dspark["config"][key], key
    assert dflash["train_tokens"] == dspark["train_tokens"]
    for tau in ("tau_greedy", "tau_prob"):
        assert dspark["eval"][tau] >= 1.15 * dflash["eval"][tau], tau


@pytest.mark.parametrize("spec_type", ["draft-simple", "draft-eagle3", "draft-mtp"])
def test_chain_drafter_cards_record_training_and_served_acceptance(spec_type):
    """Each chain drafter's record and card give its training (command, data, steps, minutes) and the
    acceptance per draft position measured by serving it on held-out prompts at T=0 and at T=1."""
    folder, n_max = STDLIB_CODER_DRAFTERS[spec_type]
    summary = json.loads((folder / "training_summary.json").read_text())
    assert summary["steps"] > 0 and summary["minutes"] > 0
    for key, temperature in (("acceptance", 0), ("acceptance_t1", 1)):
        record = summary[key]
        assert record["temperature"] == temperature and record["n_max"] == n_max
        assert len(record["acceptance_per_position"]) == n_max and record["tau"] > 1.0
    card = (folder / "README.md").read_text()
    for needed in ("specserve train-draft", "held out", "steps", "minutes", "| T=0 |", "| T=1 (drafts sampled"):
        assert needed in card, needed
