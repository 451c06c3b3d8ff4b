"""vLLM's per-request `metrics.speculative_decoding` object from the per-request counters."""
from specserve.speculative.stats import RequestDraftStats


def test_histograms_and_totals():
    stats = RequestDraftStats()
    for drafted, accepted in [(3, 0), (3, 3), (3, 1), (2, 2), (3, 3)]:
        stats.n_draft_tokens += drafted
        stats.record(drafted, accepted)
    m = stats.vllm_metrics(num_spec_tokens=4)
    assert m["acceptance_histogram"] == [1, 1, 1, 2, 0]            # entry j: steps that accepted j tokens
    assert m["acceptance_histogram_by_draft_length"] == {"2": [0, 0, 1], "3": [1, 1, 0, 2]}
    assert m["num_spec_steps"] == 5 and m["num_accepted_draft_tokens"] == 9 and m["num_draft_tokens"] == 14
    assert m["mean_acceptance_length"] == 1 + 9 / 5 and m["draft_acceptance_rate"] == 9 / 14
    assert m["per_position_accepted"] == [4, 3, 2] and m["num_spec_tokens"] == 4


def test_empty():
    m = RequestDraftStats().vllm_metrics(num_spec_tokens=3)
    assert m["acceptance_histogram"] == [0, 0, 0, 0] and m["mean_acceptance_length"] == 1.0
    assert m["draft_acceptance_rate"] == 0.0 and m["acceptance_histogram_by_draft_length"] == {}
