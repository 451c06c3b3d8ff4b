"""--spec-schedule: the batch-wide acceptance scheduler for every spec type, and the attention
groups that keep one long draft from padding every other slot's attention."""
import json
import shutil

import numpy as np
import pytest
import torch

from support.block_drafters import write_block_drafter
from support.model_drafters import add_mtp, perturbed_copy, write_eagle3
from support.models import blas_is_row_invariant, write_model
from support.proposers import Oracle
from support.scheduling import measure_slot_count
from support.prompts import DRAFTER_PROMPTS, PI, TWO
from specserve import LLM, SamplingParams
from specserve.models.step_batch import StepBatch, split_by_length
from specserve.speculative import registry
from specserve.speculative import realized_records
from specserve.speculative.acceptance_schedule import DECIDE_EVERY, EXPLORE_EVERY, PRIOR, AcceptanceScheduler
from specserve.speculative.base import Draft, DraftRequest, Proposer, ProposerContext
from specserve.speculative.driver import SpecDriver
from specserve.speculative.draft_cost import MEASURED_AFTER
from specserve.speculative.step_cost import StepCostTable

PROMPTS = DRAFTER_PROMPTS[:3] + [PI[:11], [100, 101, 102, 103] * 2, TWO]
GREEDY = SamplingParams(temperature=0, max_tokens=40, ignore_eos=True)


def test_confidences_stop_at_a_cost_jump_only_where_a_request_samples():
    """Past 16 rows a step costs a jump more (the kernels' second row tile). With the drafts' own confidences
    and a sampled request, Algorithm 1 keeps its early stop (lossless sampling needs it) and halts there; when
    every request is greedy, which any verified length leaves exact, it admits up to its best count, as it
    does with rates from history."""
    rows = list(range(1, 41))
    table = StepCostTable(rows, [0.001 + 0.00001 * r + (0.0003 if r > 16 else 0.0) for r in rows])
    sched = AcceptanceScheduler(4, 8, table)
    drafts = [Draft(list(range(8)), confidence=[0.95] * 8) for _ in range(4)]
    assert sched.lengths([0, 1, 2, 3], drafts).tolist() == [3, 3, 3, 3]                # 16 rows
    assert sched.lengths([0, 1, 2, 3], drafts, greedy=True).tolist() == [8, 8, 8, 8]
    for slot in range(4):
        for _ in range(30):
            sched.observe(slot, 8, 8)                                                   # history: 0.95+
    history = [Draft(list(range(8))) for _ in range(4)]
    assert sched.lengths([0, 1, 2, 3], history).tolist() == [8, 8, 8, 8]


def test_scheduler_learns_each_slots_acceptance():
    flat = AcceptanceScheduler(2, 4, StepCostTable([1, 64], [0.01, 0.01]))     # rows are free: verify all
    assert flat.lengths([0, 1], [Draft([1, 2, 3, 4]), Draft([5, 6])]).tolist() == [4, 2]
    # each row costs 15 % of a one-row step: only drafts likely to be accepted pay off
    steep = AcceptanceScheduler(2, 4, StepCostTable(list(range(1, 11)), [0.010 + 0.0015 * r for r in range(10)]))
    assert steep.rate(0) == PRIOR
    for _ in range(6):
        steep.observe(0, 4, 4)          # slot 0: everything accepted
        steep.observe(1, 4, 0)          # slot 1: the first draft token rejected
    assert steep.rate(0) > 0.9 and steep.rate(1) < 0.15
    lengths = steep.lengths([0, 1], [Draft([1, 2, 3, 4]), Draft([5, 6, 7, 8])])
    assert lengths.tolist() == [4, 0]
    # an unverified draft whose first token keeps matching brings slot 1 back
    for _ in range(8):
        steep.observe_unverified(1, True)
    assert steep.lengths([1], [Draft([5, 6])]).tolist()[0] >= 1
    steep.begin(1)                      # a new request starts from the all-slots counts, lightly weighted
    assert steep.tried[1] == pytest.approx(4.0) and steep.rate(1) > PRIOR
    steep.begin(1, sampled=True)        # ... of requests of its kind: no sampled request was seen yet
    assert steep.tried[1] == 0 and steep.rate(1) == PRIOR
    steep.observe(1, 4, 0)
    steep.begin(0, sampled=True)
    assert steep.rate(0) < PRIOR        # the sampled requests' history, not the greedy one's


def test_the_draft_length_is_where_drafting_pays_best():
    """At many slots a long draft costs more to draft and verify than its tail brings: the scheduler
    drafts fewer tokens; at one slot, where rows are nearly free, the longest."""
    table = StepCostTable([1, 64], [0.001, 0.001 + 63 * 0.00005])
    sched = AcceptanceScheduler(4, 6, table)
    slots, caps = [0, 1, 2, 3], [6] * 4
    for _ in range(MEASURED_AFTER + 1):         # measured at the longest length first
        assert sched.drafting_slots(slots, caps) == [0, 1, 2, 3] and sched.draft_length == 6
        sched.note_draft_time(0.0001 * 7, 4)    # a draft costs 0.1 ms per row (the anchor and the drafts)
    for slot in range(4):
        for _ in range(20):
            sched.observe(slot, 3, 2)           # ~0.7 of the tokens reached are accepted
    decisions = [sched.drafting_slots(slots, caps) for _ in range(2 * DECIDE_EVERY)]
    assert decisions[-1] == slots and 1 < sched.draft_length < 6 and sched.draft_length == sched.paying_length
    # one slot where rows are nearly free, to verify and to draft: the whole draft
    one = AcceptanceScheduler(1, 6, StepCostTable([1, 64], [0.001, 0.001 + 63 * 0.00001]))
    for _ in range(MEASURED_AFTER + 1):
        one.drafting_slots([0], [6])
        one.note_draft_time(0.00002 * 7, 1)
    for _ in range(20):
        one.observe(0, 3, 2)
    assert [one.drafting_slots([0], [6]) for _ in range(2 * DECIDE_EVERY)][-1] == [0] and one.draft_length == 6


def test_draft_lengths_stop_at_what_the_requests_can_draft():
    """Sampled requests draft at most --spec-draft-n-max-sampled, which the driver's caps carry: the
    scheduler neither weighs nor times longer drafts for them (it had priced drafts of 8 that DSpark
    drafted as 3)."""
    table = StepCostTable([1, 64], [0.001, 0.001 + 63 * 0.00001])
    sched = AcceptanceScheduler(4, 6, table)
    slots = [0, 1, 2, 3]
    for _ in range(MEASURED_AFTER + 1):         # measured at the longest length the requests can draft
        assert sched.drafting_slots(slots, [2] * 4) == slots and sched.draft_length == 2
        sched.note_draft_time(0.0002, 4)
    assert {n: set(t) for n, t in sched.draft_cost.steady.items()} == {4: {2}}
    for slot in range(4):
        for _ in range(20):
            sched.observe(slot, 2, 2)
    decisions = [sched.drafting_slots(slots, [2] * 4) for _ in range(2 * DECIDE_EVERY)]
    assert decisions[-1] == slots and sched.draft_length == sched.paying_length == 2


def test_the_driver_caps_lengths_by_the_requests_kind_not_their_remaining_budget():
    """The scheduler hears each request's longest draft for its kind (greedy or sampled), not how many tokens
    the request has left: the drafts are truncated to that anyway, and lengths weighed down to it at the end
    of each wave of requests cost DFlash at 4 slots and T=0 a tenth of its speedup."""
    ctx = ProposerContext(target=None, n_slots=2, max_ctx=100, options={"spec_draft_n_max": 6})

    class SampledDraftLess(Proposer):
        name = "sampled-draft-less"

        def draft(self, requests):
            return {r.slot: Draft([5] * 6) for r in requests}

        def max_draft_sampled(self):
            return 2

    def first_length(temperatures, budgets):
        driver = SpecDriver([SampledDraftLess(ctx)], 2, AcceptanceScheduler(2, 6, StepCostTable([1, 64], [0.01, 0.01])))
        driver.draft([DraftRequest(slot, budget, 4, 1, np.zeros(4, dtype=np.int64), temperature=t)
                      for slot, (t, budget) in enumerate(zip(temperatures, budgets))])
        return driver.scheduler.draft_length         # the first steps measure the longest draft

    assert first_length([1.0, 1.0], [50, 50]) == 2
    assert first_length([0.0, 1.0], [1, 50]) == 6


def test_a_cut_draft_with_q_teaches_nothing():
    """A draft cut to nothing teaches its slot's rate by whether its first token equals the target's, which
    is its acceptance only without q: a draft verified with q is accepted with min(1, p/q)."""
    ctx = ProposerContext(target=None, n_slots=2, max_ctx=100, options={})

    class TwoKinds(Proposer):
        name = "two-kinds"

        def draft(self, requests):
            return {r.slot: Draft([5, 6], torch.full((2, 8), 1 / 8) if r.slot else None) for r in requests}

    driver = SpecDriver([TwoKinds(ctx)], 2, AcceptanceScheduler(2, 2, StepCostTable([1, 64], [0.01, 0.01])))
    driver.scheduler.lengths = lambda slots, drafts, greedy: np.zeros(len(slots), dtype=np.int64)   # all cut
    requests = [DraftRequest(slot, 2, 4, 1, np.zeros(4, dtype=np.int64), temperature=1.0) for slot in (0, 1)]
    assert driver.draft(requests) == {} and driver.unverified == {0: 5}


def test_a_reused_no_is_known_before_the_requests_are_built():
    sched = AcceptanceScheduler(4, 3, StepCostTable([1, 64], [0.01, 0.04]))
    slots, caps = [0, 1, 2, 3], [3] * 4
    assert not sched.skips(4)                                    # nothing measured yet: every slot drafts
    measure_slot_count(sched, slots, caps, 0.05)                           # a draft call as slow as 5 steps
    assert sched.drafting_slots(slots, caps) == [] and sched.last_decision is False
    n = sched.n_decisions
    skipped = [sched.skips(4) for _ in range(EXPLORE_EVERY)]
    assert sched.n_decisions == n + sum(skipped) and not sched.steady
    # every step but the exploring one (the first due after EXPLORE_EVERY) is skipped
    assert skipped.count(False) <= 1
    if False in skipped:
        assert sched.drafting_slots(slots, caps) != []           # ... which explores
    assert not sched.skips(3)                                    # a new slot count is decided afresh


def test_attention_groups_split_a_long_segment_from_one_row_slots():
    segs = StepBatch.build([(s, [1], 100) for s in range(12)] + [(12, list(range(60)), 100)],
                           list(range(72))).segments
    groups = split_by_length(segs, 2)
    assert [len(g) for g in groups] == [12, 1]
    even = StepBatch.build([(s, [1, 2], 100) for s in range(8)], list(range(16))).segments
    assert len(split_by_length(even, 2)) == 1


def _one_row_beside_a_long_segment(model, long_slot):
    prefix = torch.arange(10, 50)
    c_alone, c_mixed = model.new_cache(12, 256), model.new_cache(12, 256)
    for c in (c_alone, c_mixed):
        model.forward_step(StepBatch.build([(s, prefix, 0) for s in range(12)], [0]), c)
    alone = model.forward_step(StepBatch.build([(0, [7], 40)], [0]), c_alone)
    batch = StepBatch.build([(s, list(range(3, 70)) if s == long_slot else [7], 40) for s in range(12)], [0])
    return alone, model.forward_step(batch, c_mixed), batch


@pytest.mark.parametrize("long_slot", [11, 5])
def test_one_row_beside_a_long_segment_is_bit_identical_native(tiny_qwen3, long_slot):
    """The native kernels: a one-row slot's logits beside a 67-row segment equal its logits alone."""
    from specserve.models.transformer import CausalLM
    alone, mixed, _ = _one_row_beside_a_long_segment(CausalLM.from_pretrained(tiny_qwen3), long_slot)
    assert torch.equal(alone.logits, mixed.logits)


@pytest.mark.xfail(not blas_is_row_invariant(), strict=True,
                   reason="this CPU's BLAS computes a row differently at 16+ rows (e.g. MKL on Intel): the "
                          "PyTorch path is batch-invariant only where the BLAS is")
@pytest.mark.parametrize("long_slot", [11, 5])
def test_grouped_attention_is_bit_identical(tiny_qwen3, long_slot, torch_kernels):
    """The PyTorch path: a one-row slot's logits beside a long segment equal its logits alone, whether its
    group's slots are contiguous (long segment last) or not (long segment in the middle: the group reads a
    slice of the cache with padding rows for the slot it skips)."""
    from specserve.models.transformer import CausalLM
    alone, mixed, batch = _one_row_beside_a_long_segment(CausalLM.from_pretrained(tiny_qwen3), long_slot)
    assert len(batch.groups) == 2
    assert isinstance(batch.groups[0].slot_select, slice) and batch.groups[0].n_slots == 12 - (long_slot == 11)
    assert torch.equal(alone.logits, mixed.logits)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sched")
    target = write_model(tmp / "t", "qwen3", seed=1, std=0.25, num_hidden_layers=4)
    with_mtp = tmp / "t-mtp"
    shutil.copytree(target, with_mtp)
    add_mtp(with_mtp, "deepseek")
    table = tmp / "steep.json"          # each verified row costs a quarter of a step
    table.write_text(json.dumps({"rows": [1, 64], "seconds": [0.01, 0.01 + 63 * 0.0025]}))
    return {"target": target, "with_mtp": with_mtp, "table": table, "tmp": tmp}


def _config(models, spec_type):
    """(model folder, LLM options) for one spec type; drafter folders are written on first use."""
    target, tmp = models["target"], models["tmp"]
    drafters = {
        "draft-simple": (tmp / "near", lambda out: perturbed_copy(target, out, noise=0.004)),
        "draft-eagle3": (tmp / "e", lambda out: write_eagle3(out, target, "specforge", draft_vocab=200)),
        "draft-dflash": (tmp / "df", lambda out: write_block_drafter(out, target, "deepspec", block_size=4)),
    }
    if spec_type == "ngram-simple":
        return target, {"spec_ngram_simple_size_n": 2, "spec_ngram_simple_size_m": 6}
    if spec_type == "ngram-mod":
        return target, {"spec_ngram_mod_n_match": 2, "spec_ngram_mod_n_min": 2, "spec_ngram_mod_n_max": 8}
    if spec_type == "draft-mtp":
        return models["with_mtp"], {"spec_draft_n_max": 4}
    if spec_type in drafters:
        folder, write = drafters[spec_type]
        if not folder.exists():
            write(folder)
        return target, {"draft_model": folder, "spec_draft_n_max": 4}
    return target, {}


@pytest.mark.parametrize("spec_type", ["ngram-simple", "ngram-mod", "test-oracle", "draft-simple", "draft-eagle3",
                                       "draft-mtp", "draft-dflash"])
def test_scheduled_speculation_is_lossless_for_every_type(models, spec_type, monkeypatch):
    monkeypatch.setitem(registry.REGISTRY, Oracle.name, Oracle)
    # the model alone decides (from the cost table): timed steps of a tiny model are noise, and would make
    # "some drafts verified" a matter of luck
    monkeypatch.setattr(realized_records, "REALIZED_STEPS", (10 ** 9, 10 ** 9))
    model, extra = _config(models, spec_type)
    reference = [o.token_ids for o in LLM(model, n_parallel=3).generate(PROMPTS, GREEDY)]
    totals = {}
    for schedule in (False, True):
        opts = dict(extra, spec_schedule=True, spec_schedule_cost_table=str(models["table"])) if schedule else extra
        llm = LLM(model, spec_type=spec_type, n_parallel=3, **opts)
        assert [o.token_ids for o in llm.generate(PROMPTS, GREEDY)] == reference, (spec_type, schedule)
        totals[schedule] = llm.engine.driver.stats_dict()[spec_type]["n_gen_tokens"]
    assert 0 < totals[True] <= totals[False], totals     # some drafts verified ...
    if totals[False] >= 20:                                # ... and, of a drafter that drafts a lot, some cut
        assert totals[True] < totals[False], totals


def test_scheduled_sampling_keeps_seeded_outputs_batch_independent(models):
    """At T > 0 the scheduler never looks at the drafted tokens: a seeded request gives the same
    output alone and in a batch, scheduled or not (drafts without q: sample and compare)."""
    target = models["target"]
    params = SamplingParams(temperature=0.8, max_tokens=30, seed=11, ignore_eos=True)
    alone = LLM(target).generate(PROMPTS[:1], params)[0].token_ids
    llm = LLM(target, spec_type="ngram-simple", n_parallel=3, spec_ngram_simple_size_n=2, spec_schedule=True,
              spec_schedule_cost_table=str(models["table"]))
    outs = llm.generate(PROMPTS[:3], [params, SamplingParams(temperature=0.8, max_tokens=30, seed=1),
                                      SamplingParams(temperature=0, max_tokens=30)])
    assert outs[0].token_ids == alone
    # the two sampled requests' slots learn into the sampled pool (row 3 + 1), the greedy one's into row 3
    assert sorted(llm.engine.driver.scheduler.pool) == [3, 4, 4]


def test_schedule_profiles_the_target_when_no_table_is_given(models):
    llm = LLM(models["target"], spec_type="ngram-simple", n_parallel=2, spec_schedule=True)
    table = llm.engine.driver.scheduler.cost_table
    assert table.rows[0] == 1 and table.rows[-1] == 2 * (llm.engine.driver.max_draft() + 1)
    assert np.all(np.diff(table.seconds) >= 0)


@pytest.mark.parametrize("spec_type", ["draft-simple", "draft-eagle3", "draft-mtp", "draft-dflash"])
def test_model_drafters_draft_only_the_scheduled_length(models, spec_type, monkeypatch):
    """The scheduler's draft length reaches the drafters: chains stop, and a block drafter drafts a
    shorter block, at it (a shorter draft costs less); the output is unchanged."""
    def pays_at_two(self, slots, caps, drafting):
        self.paying_length = 2
        return True

    monkeypatch.setattr(AcceptanceScheduler, "_drafting_pays", pays_at_two)
    monkeypatch.setattr(AcceptanceScheduler, "realized_speedup", lambda self, n: None)    # the model decides
    model, extra = _config(models, spec_type)
    reference = [o.token_ids for o in LLM(model, n_parallel=3).generate(PROMPTS, GREEDY)]
    llm = LLM(model, spec_type=spec_type, n_parallel=3, spec_schedule=True, **extra)
    proposer = llm.engine.driver.proposers[0]
    longest = []
    draft = proposer.draft
    monkeypatch.setattr(proposer, "draft", lambda requests: longest.append(
        max(len(d.tokens) for d in drafts.values()) if (drafts := draft(requests)) else 0) or drafts)
    assert [o.token_ids for o in llm.generate(PROMPTS, GREEDY)] == reference
    measuring = MEASURED_AFTER + 1                              # the first calls measure the longest drafts
    assert longest[:measuring] == [4] * measuring and max(longest[measuring:]) == 2


@pytest.mark.parametrize("spec_type", ["ngram-simple", "draft-simple", "draft-eagle3", "draft-mtp", "draft-dflash"])
def test_steps_without_drafting_stay_lossless(models, spec_type, monkeypatch):
    """Drafting skipped for most steps (a draft call priced at a second) and resumed every
    EXPLORE_EVERY-th: the drafters catch up on the skipped context and the output is unchanged."""
    def a_second(self, seconds, n_slots):
        self.draft_cost.note(1.0, n_slots, self.draft_length, steady=True)

    monkeypatch.setattr(AcceptanceScheduler, "note_draft_time", a_second)
    model, extra = _config(models, spec_type)
    reference = [o.token_ids for o in LLM(model, n_parallel=3).generate(PROMPTS, GREEDY)]
    llm = LLM(model, spec_type=spec_type, n_parallel=3, spec_schedule=True, **extra)
    assert [o.token_ids for o in llm.generate(PROMPTS, GREEDY)] == reference
    calls = llm.engine.driver.stats_dict()[spec_type]["n_call_draft"]
    assert 0 < calls < llm.engine.n_steps / 2
