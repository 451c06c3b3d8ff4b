"""DeferredBatches: target batches replayed per slot, in order, only when the slot needs them."""
import torch

from specserve.models.forward_output import ForwardOutput
from specserve.models.step_batch import StepBatch
from specserve.speculative.base import TargetBatch
from specserve.speculative.deferred_batches import LIMIT, DeferredBatches


def _batch(step: int, slots: list[int]) -> TargetBatch:
    logits = torch.zeros(len(slots), 4096)
    return TargetBatch(StepBatch.build([(s, [step], step) for s in slots], [0]),
                       ForwardOutput(logits, torch.zeros(len(slots), 8), (1,), torch.zeros(len(slots), 8)))


def test_each_slot_replays_its_own_segments_in_order_and_only_once():
    seen = []
    deferred = DeferredBatches(3, lambda kept, seg, slot: seen.append((slot, seg.pos0)))
    for step in range(5):
        deferred.add(_batch(step, [0, 1] if step < 3 else [1, 2]))
    assert seen == []                                   # nothing replayed before a slot asks
    kept = deferred.kept[0]                             # what a drafter reads is kept, the logits are not
    assert not hasattr(kept, "logits") and kept.taps.shape == (2, 8) and kept.tap_layers == (1,)
    deferred.catch_up(1)
    assert seen == [(1, p) for p in range(5)]
    deferred.catch_up(1)                                # nothing new
    deferred.catch_up(0)
    assert seen[5:] == [(0, 0), (0, 1), (0, 2)]
    assert deferred.base == 3                           # slot 2 had no request before batch 3: 0-2 dropped
    deferred.skip(2)                                    # slot 2's request ended: its rows are not needed
    deferred.add(_batch(5, [2]))
    deferred.catch_up(2)
    assert seen[8:] == [(2, 5)] and len(deferred.kept) == 1
    deferred.catch_up(0), deferred.catch_up(1)
    assert seen[9:] == [] and deferred.kept == []       # every slot has replayed everything: nothing kept


def test_kept_batches_are_bounded():
    seen = []
    deferred = DeferredBatches(2, lambda kept, seg, slot: seen.append(slot))
    for step in range(3 * LIMIT):
        deferred.add(_batch(step, [0, 1]))
        assert len(deferred.kept) <= LIMIT
    assert seen.count(0) >= 2 * LIMIT and seen.count(1) >= 2 * LIMIT   # caught up when the limit was passed
