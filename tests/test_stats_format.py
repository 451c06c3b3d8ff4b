"""Statistics lines in llama.cpp's formats, and the driver's counter semantics."""
import numpy as np

from specserve.speculative.base import Draft, DraftRequest, Proposer, ProposerContext
from specserve.speculative.driver import SpecDriver
from specserve.speculative.stats import ImplCounters, RequestDraftStats


def test_impl_line_matches_upstream_example():
    c = ImplCounters(n_call_begin=1, n_call_draft=87, n_call_accept=87, n_gen_drafts=87, n_acc_drafts=70,
                     n_gen_tokens=259, n_acc_tokens=167, n_acc_per_pos=[70, 55, 42],
                     t_begin_us=5, t_draft_us=325555, t_accept_us=114)
    assert c.line("draft-eagle3") == (
        "statistics     draft-eagle3: #calls(b,g,a) =    1     87     87, #gen drafts =     87, "
        "#acc drafts =    70, #gen tokens =    259, #acc tokens =   167, #mean acc len = 2.92, "
        "#acc rate/pos = (0.805, 0.632, 0.483), dur(b,g,a) = 0.005, 325.555, 0.114 ms")
    assert "#mean acc len" not in ImplCounters().line("ngram-simple")


def test_request_lines():
    s = RequestDraftStats(n_draft_tokens=750)
    for _ in range(250):
        s.record(3, 0)
    s.n_draft_accepted = 561
    s.accepted_per_pos = [217, 186, 158]
    assert s.lines(3) == [
        "draft acceptance = 0.74800 (  561 accepted /   750 generated), mean len =  3.24",
        "     acc per pos = (0.868, 0.744, 0.632)"]
    assert RequestDraftStats().lines() == []


class Scripted(Proposer):
    """Returns pre-set drafts per slot."""
    def __init__(self, ctx, name, drafts):
        super().__init__(ctx)
        self.name = name
        self.drafts = drafts
        self.accepts = []

    def draft(self, requests):
        return {r.slot: Draft(list(self.drafts[r.slot])) for r in requests if self.drafts.get(r.slot)}

    def accept(self, slot, n, is_other):
        self.accepts.append((slot, n, is_other))


def test_driver_precedence_truncation_and_counters():
    ctx = ProposerContext(target=None, n_slots=3, max_ctx=100, options={})
    first = Scripted(ctx, "first", {0: [1, 2, 3, 4, 5]})
    second = Scripted(ctx, "second", {0: [9], 1: [7, 7]})
    driver = SpecDriver([first, second], 3)
    for slot in range(3):
        driver.begin(slot, np.zeros(4, dtype=np.int64))
    reqs = [DraftRequest(slot, n_max=3, pos0=4, id_last=1, tokens=np.zeros(4, dtype=np.int64)) for slot in range(3)]
    drafts = driver.draft(reqs)
    assert drafts[0].tokens == [1, 2, 3]          # truncated to the caller cap after drafting
    assert drafts[1].tokens == [7, 7]             # the lower-priority method filled slot 1
    assert 2 not in drafts
    c1, c2 = driver.counters["first"], driver.counters["second"]
    assert (c1.n_call_begin, c1.n_call_draft, c1.n_gen_drafts, c1.n_gen_tokens) == (3, 1, 1, 3)
    assert (c2.n_call_draft, c2.n_gen_drafts, c2.n_gen_tokens) == (1, 1, 2)
    driver.verified(0, 3, 2, 1)
    driver.verified(1, 2, 0, 5)
    assert (c1.n_call_accept, c1.n_acc_drafts, c1.n_acc_tokens, c1.n_acc_per_pos) == (1, 1, 2, [1, 1])
    assert (c2.n_call_accept, c2.n_acc_drafts, c2.n_acc_tokens) == (1, 0, 0)
    assert first.accepts == [(0, 2, False), (1, 0, True)]
    assert second.accepts == [(0, 2, True), (1, 0, False)]
    # when every slot got a draft from the first method, the second is not called at all
    driver.draft([DraftRequest(0, 3, 4, 1, np.zeros(4, dtype=np.int64))])
    assert (c1.n_call_draft, c2.n_call_draft) == (2, 1)
