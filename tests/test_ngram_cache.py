"""ngram-cache: counting, drafting thresholds and tie-breaking, the file format, the proposer,
and the lookup-stats simulation on hand-derived token streams."""
import re
import struct

import numpy as np
import pytest

from specserve.commands.lookup import simulate, stats_lines
from specserve.errors import OptionError
from specserve.speculative.base import DraftRequest, ProposerContext
from specserve.speculative.ngram_cache import NgramCacheProposer
from specserve.speculative.ngram_cache_store import NgramCache, cache_draft, ngram_key


def cache_of(table):
    cache = NgramCache()
    for ngram, part in table.items():
        cache.table[ngram_key(ngram)] = dict(part)
    return cache


def draft(tokens, ctx=None, dyn=None, static=None, n_draft=1):
    return cache_draft(tokens, n_draft, ctx or NgramCache(), dyn or NgramCache(), static or NgramCache())


def test_update_counts_ngrams_of_each_size():
    cache = NgramCache()
    cache.update([1, 2, 1, 2, 3], 1, 2, 5)
    assert cache.table == {(1, -1, -1, -1): {2: 2}, (2, -1, -1, -1): {1: 1, 3: 1},
                           (1, 2, -1, -1): {1: 1, 3: 1}, (2, 1, -1, -1): {2: 1}}
    assert list(cache.table) == [(1, -1, -1, -1), (2, -1, -1, -1), (1, 2, -1, -1), (2, 1, -1, -1)]
    only_new = NgramCache()
    only_new.update([1, 2, 1, 2, 3], 1, 2, 2)            # n-grams ending before the last 2 tokens
    assert only_new.table == {(1, -1, -1, -1): {2: 1}, (2, -1, -1, -1): {3: 1},
                              (2, 1, -1, -1): {2: 1}, (1, 2, -1, -1): {3: 1}}


def test_update_equals_a_plain_loop_in_content_and_order():
    tokens = np.random.default_rng(0).integers(0, 5, size=3000)
    fast = NgramCache()
    fast.update(tokens, 1, 4, len(tokens))
    plain = NgramCache()          # llama.cpp's loop, one position at a time
    for size in range(1, 5):
        for i in range(size, len(tokens)):
            part = plain.table.setdefault(ngram_key(tokens[i - size:i]), {})
            part[int(tokens[i])] = part.get(int(tokens[i]), 0) + 1
    assert fast.to_bytes() == plain.to_bytes()           # same counts in the same order
    incremental = NgramCache()
    for i in range(1, len(tokens) + 1):
        incremental.update(tokens[:i], 1, 4, 1)
    assert incremental.table == fast.table


def test_context_cache_uses_lax_thresholds():
    # size 1: at least 2 samples and 66 %
    assert draft([0, 7], cache_of({(7,): {5: 1}})) == []
    assert draft([0, 7], cache_of({(7,): {5: 2}})) == [5]
    assert draft([0, 7], cache_of({(7,): {5: 2, 6: 1}})) == [5]        # 200 >= 66 * 3
    assert draft([0, 7], cache_of({(7,): {5: 2, 6: 2}})) == []         # 200 < 66 * 4
    # size 4: one sample and 50 % are enough
    assert draft([1, 2, 3, 4], cache_of({(1, 2, 3, 4): {9: 1}})) == [9]


def test_dynamic_cache_uses_strict_thresholds():
    assert draft([0, 7], dyn=cache_of({(7,): {5: 3}})) == []            # 3 < 4 samples
    assert draft([0, 7], dyn=cache_of({(7,): {5: 4}})) == [5]
    assert draft([0, 7], dyn=cache_of({(7,): {5: 3, 6: 1}})) == [5]     # 300 >= 75 * 4
    assert draft([0, 7], dyn=cache_of({(7,): {5: 5, 6: 2}})) == []      # 500 < 75 * 7
    # the context cache is asked first
    assert draft([0, 7], cache_of({(7,): {5: 2}}), cache_of({(7,): {6: 9}})) == [5]


def test_longest_ngram_first_and_fall_through():
    ctx = cache_of({(6, 7): {1: 1, 2: 1}, (7,): {3: 5}})
    assert draft([6, 7], ctx) == [1]                    # size 2 (tie -> lowest id) beats size 1
    ctx = cache_of({(6, 7): {1: 1}, (7,): {3: 5}})
    assert draft([6, 7], ctx) == [3]                    # size 2 has 1 < 2 samples: size 1 drafts


def test_ties_go_to_the_lowest_token_id_whatever_the_insertion_order():
    for part in ({9: 1, 8: 1}, {8: 1, 9: 1}):
        assert draft([1, 2, 3, 4], cache_of({(1, 2, 3, 4): part})) == [8]
        assert draft([6, 7], static=cache_of({(6, 7): part})) == [8]


def test_static_cache_weights_and_static_only_drafts():
    ctx = cache_of({(1, 2, 3, 4): {8: 1, 9: 1}})
    static = cache_of({(3, 4): {9: 1}})
    assert draft([1, 2, 3, 4], ctx, static=static) == [9]           # 1 * 100 beats 1 * 1
    assert draft([6, 7], static=cache_of({(6, 7): {4: 1}})) == []     # fewer than 2 samples
    assert draft([6, 7], static=cache_of({(6, 7): {4: 2}})) == [4]
    assert draft([6, 7], static=cache_of({(6, 7): {4: 1, 5: 2}})) == [5]
    assert draft([6, 7], static=cache_of({(6, 7): {4: 2, 5: 1, 3: 2}})) == []   # 200 < 50 * 5
    assert draft([0, 7], static=cache_of({(6, 7): {4: 2}})) == []        # fewer than 2 tokens of input


def test_drafts_chain_until_nothing_qualifies():
    ctx = cache_of({(1,): {2: 2}, (2,): {3: 2}})
    assert draft([5, 1], ctx, n_draft=8) == [2, 3]
    assert draft([5, 1], ctx, n_draft=1) == [2]


def test_file_format_is_byte_exact():
    cache = cache_of({(1, 2): {3: 4, 7: 1}, (5,): {6: 2}})
    expected = struct.pack("<4ii4i", 1, 2, -1, -1, 2, 3, 4, 7, 1) + struct.pack("<4ii2i", 5, -1, -1, -1, 1, 6, 2)
    assert cache.to_bytes() == expected
    assert NgramCache.from_bytes(expected).table == cache.table


def test_round_trip_and_merge(tmp_path):
    tokens = np.random.default_rng(1).integers(0, 50, size=5000)
    a, b = NgramCache(), NgramCache()
    a.update(tokens[:3000], 1, 4, 3000)
    b.update(tokens[3000:], 2, 2, 2000)
    a.save(tmp_path / "a.bin")
    loaded = NgramCache.load(tmp_path / "a.bin")
    assert loaded.table == a.table
    loaded.save(tmp_path / "again.bin")
    assert (tmp_path / "again.bin").read_bytes() == (tmp_path / "a.bin").read_bytes()
    merged = NgramCache()
    merged.merge(a)
    merged.merge(b)
    for ngram in set(a.table) | set(b.table):
        part_a, part_b = a.table.get(ngram, {}), b.table.get(ngram, {})
        assert merged.table[ngram] == {t: part_a.get(t, 0) + part_b.get(t, 0) for t in set(part_a) | set(part_b)}


def test_corrupt_or_missing_files_give_clear_errors(tmp_path):
    good = cache_of({(1, 2): {3: 4}}).to_bytes()
    with pytest.raises(OptionError, match="not a multiple of 4"):
        NgramCache.from_bytes(good + b"\x00")
    with pytest.raises(OptionError, match="corrupt record at byte 0"):
        NgramCache.from_bytes(good[:-4])
    with pytest.raises(OptionError, match="truncated record at byte 28"):
        NgramCache.from_bytes(good + good[:8])
    with pytest.raises(OptionError, match="count 0"):
        NgramCache.from_bytes(struct.pack("<4ii2i", 1, 2, -1, -1, 1, 3, 0))
    with pytest.raises(OptionError, match="n-gram cache file not found"):
        NgramCache.load(tmp_path / "missing.bin")


def _proposer(tmp_path, **options):
    return NgramCacheProposer(ProposerContext(target=None, n_slots=2, max_ctx=512, options=options))


def test_proposer_context_cache_per_request(tmp_path):
    prop = _proposer(tmp_path)
    assert prop.max_draft() == 8
    prompt = np.array([1, 2, 3, 4, 1, 2, 3, 4, 1, 2], dtype=np.int64)
    prop.begin(0, prompt)
    out = prop.draft([DraftRequest(0, 100, 10, 3, prompt)])
    # 4-grams of prompt + id_last: (4,1,2,3) -> 4, (1,2,3,4) -> 1, ... the cycle, up to 8 tokens
    assert out[0].tokens == [4, 1, 2, 3, 4, 1, 2, 3]
    assert prop.cache_size[0] == 11
    # a new request in the slot starts from a fresh context cache
    other = np.array([50, 51, 52], dtype=np.int64)
    prop.begin(0, other)
    assert len(prop.context[0]) == 0
    assert prop.draft([DraftRequest(0, 100, 3, 1, other)]) == {}


def test_proposer_slot_context_keeps_counts_across_requests_as_llama_cpp(tmp_path):
    """--spec-ngram-cache-context slot: begin() does nothing, so the next request drafts from the last one's
    n-grams and its own prompt is counted only past the number of tokens the slot had already counted."""
    prop = _proposer(tmp_path, spec_ngram_cache_context="slot")
    prompt = np.array([1, 2, 3, 4, 1, 2, 3, 4, 1, 2], dtype=np.int64)
    prop.begin(0, prompt)
    assert prop.draft([DraftRequest(0, 100, 10, 3, prompt)])[0].tokens == [4, 1, 2, 3, 4, 1, 2, 3]
    counted = dict(prop.context[0].table)
    # an unrelated, shorter request: nothing of it is counted, and the old n-grams still draft
    other = np.array([50, 51, 52, 1, 2], dtype=np.int64)
    prop.begin(0, other)
    assert prop.draft([DraftRequest(0, 100, 5, 3, other)])[0].tokens == [4, 1, 2, 3, 4, 1, 2, 3]
    assert prop.context[0].table == counted and prop.cache_size[0] == 11
    # once the history passes the count, only the tokens beyond it are added, as one chunk
    longer = np.array([60, 61, 62, 63, 64, 65, 66, 67, 68, 69, 70, 71], dtype=np.int64)
    prop.draft([DraftRequest(0, 100, 12, 72, longer)])
    assert prop.cache_size[0] == 13
    assert prop.context[0].get(ngram_key([71])) == {72: 1} and prop.context[0].get(ngram_key([60])) is None
    with pytest.raises(OptionError, match="--spec-ngram-cache-context must be one of request, slot"):
        _proposer(tmp_path, spec_ngram_cache_context="forever")


def test_proposer_loads_static_cache_and_reports_a_missing_file(tmp_path):
    static = NgramCache()
    static.update([10, 11, 12, 10, 11, 12, 10], 2, 2, 7)
    static.save(tmp_path / "static.bin")
    prop = _proposer(tmp_path, lookup_cache_static=str(tmp_path / "static.bin"))
    prompt = np.array([99, 10], dtype=np.int64)
    prop.begin(1, prompt)
    # static-only drafting: (10, 11) -> 12 twice, then (11, 12) -> 10 twice, then (12, 10) -> 11 once: stop
    assert prop.draft([DraftRequest(1, 100, 2, 11, prompt)])[1].tokens == [12, 10]
    with pytest.raises(OptionError, match=r"static lookup cache \(--lookup-cache-static\) file not found"):
        _proposer(tmp_path, lookup_cache_static=str(tmp_path / "nope.bin"))
    with pytest.raises(OptionError, match="dynamic lookup cache"):
        _proposer(tmp_path, lookup_cache_dynamic=str(tmp_path / "nope.bin"))


def test_lookup_stats_simulation_hand_derived():
    # 17 tokens, chunks of 8: two chunks (the 17th token is never simulated); n_draft = 2.
    # Drafting needs >= 2 tokens. Chunk 1 (all 5s): drafts [5,5] at lengths 3 and 6 from the
    # context cache, all right: 4 / 4. Chunk 2 ([5,5,5,5,5,5,7,5]) starts with chunk 1's counts
    # as the dynamic cache: [5,5] at length 2 (dynamic, both right), [5,5] at 5 (the second
    # meets the 7), nothing after the 7: 4 drafted, 3 accepted. Total 8 drafted, 7 accepted.
    tokens = [5] * 8 + [5, 5, 5, 5, 5, 5, 7, 5] + [5]
    dynamic = NgramCache()
    result = simulate(tokens, n_ctx=8, n_draft=2, dynamic=dynamic, static=NgramCache())
    assert (result["n_drafted"], result["n_accept"], result["n_predict"]) == (8, 7, 16)
    assert dynamic.table[(5, -1, -1, -1)] == {5: 7 + 5, 7: 1}       # both chunks merged in
    lines = stats_lines(result, 0.0)
    assert lines[:3] == ["n_draft      = 2", "n_predict    = 16", "n_drafted    = 8"]
    assert lines[5:] == ["n_accept     = 7", "accept       = 87.500%"]
    assert lines[3] == "t_draft_flat = 0.00 ms"
    assert re.fullmatch(r"t_draft      = \d+\.\d\d ms, \d+\.\d\d us per token, \d+\.\d\d tokens per second",
                        lines[4])
