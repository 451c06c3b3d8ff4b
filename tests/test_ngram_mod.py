"""ngram-mod: hashing, the shared pool, chunked adds, drafts and both kinds of reset."""
import numpy as np
import pytest

from support.prompts import arr
from specserve import kernels
from specserve.speculative.base import DraftRequest, ProposerContext
from specserve.speculative.ngram_mod import EMPTY, NgramMod, NgramModPool, lcg64_hashes


def lcg64_reference(tokens):
    """llama.cpp's idx() before the modulo, as plain Python integers."""
    r = 0
    for t in tokens:
        r = (r * 6364136223846793005 + (int(t) % 2 ** 64)) % 2 ** 64
    return r


def make(n=3, n_min=2, n_max=5, n_slots=2, pool_size=None):
    ctx = ProposerContext(target=None, n_slots=n_slots, max_ctx=4096,
                          options={"spec_ngram_mod_n_match": n, "spec_ngram_mod_n_min": n_min,
                                   "spec_ngram_mod_n_max": n_max})
    prop = NgramMod(ctx)
    if pool_size is not None:
        prop.pool = NgramModPool(n, size=pool_size)
    return prop


def req(slot, tokens, id_last):
    tokens = arr(tokens)
    return DraftRequest(slot, 1000, len(tokens), id_last, tokens)


def test_vectorised_hash_equals_plain_python_lcg():
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 2 ** 31 - 1, size=300)          # large ids: products wrap many times
    for n in (1, 2, 7, 24):
        got = lcg64_hashes(tokens, n)
        assert got.dtype == np.uint64
        assert [int(h) for h in got] == [lcg64_reference(tokens[j:j + n]) for j in range(len(tokens) - n + 1)]
    pool = NgramModPool(24)
    window = tokens[10:34].tolist()
    h = pool.hash(window)
    assert h == lcg64_reference(window)
    # rolling one token forward equals hashing the shifted window
    assert pool.roll(h, window[0], 77) == lcg64_reference(window[1:] + [77])
    assert len(lcg64_hashes(tokens[:5], 24)) == 0


def test_adding_a_long_prompt_is_vectorised():
    tokens = np.random.default_rng(1).integers(0, 50000, size=200_000)
    pool = NgramModPool(24)
    pool.add_range(tokens, 0, len(tokens) - 24)
    idx = np.array([lcg64_reference(tokens[j:j + 24]) % pool.size for j in (0, 5000, 199_975)])
    # the entry holds the token after the n-gram unless a later n-gram overwrote it
    assert pool.entries[idx[0]] == tokens[24] and pool.entries[idx[2]] == tokens[199_999]


def test_add_semantics_match_sequential_writes():
    """Last write wins and `used` counts writes to occupied entries, as a sequential loop does."""
    rng = np.random.default_rng(2)
    for size in (4, 16, 64):
        pool = NgramModPool(3, size=size)
        entries, used = [EMPTY] * size, 0
        history = rng.integers(0, 6, size=80)
        for start, stop in ((0, 30), (30, 31), (31, 77)):
            pool.add_range(history, start, stop)
            for i in range(start, stop):
                slot = lcg64_reference(history[i:i + 3]) % size
                used += entries[slot] != EMPTY
                entries[slot] = int(history[i + 3])
        assert pool.entries.tolist() == entries and pool.used == used


def test_draft_chains_lookups():
    prop = make(n=3, n_min=2, n_max=5)
    prompt = [1, 2, 3, 4, 5, 6, 7, 1, 2]
    prop.begin(0, arr(prompt))          # adds [1,2,3]->4 ... [6,7,1]->2
    assert prop.slots[0].i_last == 6
    # context [1, 2, id_last=3] -> 4 -> 5 -> 6 -> 7 -> 1 (n_max = 5)
    assert prop.draft([req(0, prompt, 3)])[0].tokens == [4, 5, 6, 7, 1]
    assert prop.slots[0].n_draft_last == 5
    # [7, 1, 9] is unknown: nothing drafted
    assert prop.draft([req(0, prompt[:8], 9)]) == {}


def test_draft_shorter_than_n_min_is_dropped():
    prop = make(n=3, n_min=3, n_max=8)
    prompt = [1, 2, 3, 4, 5, 6, 7, 8]            # [1,2,3] -> 4 ... [5,6,7] -> 8
    prop.begin(0, arr(prompt))
    # [4,5,6] -> 7 -> 8, then [6,7,8] is unknown: 2 tokens < n_min = 3 -> no draft at all
    assert prop.draft([req(0, prompt + [4, 5], 6)]) == {}
    assert prop.slots[0].n_draft_last == 0
    # [3,4,5] -> 6 -> 7 -> 8: 3 tokens
    assert prop.draft([req(0, prompt + [3, 4], 5)])[0].tokens == [6, 7, 8]
    assert prop.slots[0].n_draft_last == 3


def test_new_tokens_are_added_in_chunks_of_more_than_32():
    prop = make(n=3, n_min=1, n_max=3)
    prompt = list(range(100, 110))
    prop.begin(0, arr(prompt))
    assert prop.slots[0].i_last == 7
    head = prompt + [50, 51, 52, 53]
    # 32 new tokens pending (i_last + 32 == len): not added yet, so [50, 51, 52] is unknown
    short = head + list(range(200, 223)) + [50, 51]
    assert len(short) == 7 + 32 and prop.draft([req(0, short, 52)]) == {}
    assert prop.slots[0].i_last == 7
    # 33 pending: every n-gram up to len - n is added; [50, 51, 52] -> 53 -> 200 -> 201
    longer = head + list(range(200, 224)) + [50, 51]
    assert prop.draft([req(0, longer, 52)])[0].tokens == [53, 200, 201]
    assert prop.slots[0].i_last == len(longer) - 3


def test_pool_is_shared_by_all_slots():
    prop = make(n=3, n_min=1, n_max=4, n_slots=2)
    prop.begin(0, arr([1, 2, 3, 4, 5, 6, 7]))
    prop.begin(1, arr([40, 41, 42]))
    # slot 1 never saw [1, 2, 3] but drafts it from slot 0's prompt
    assert prop.draft([req(1, [40, 41, 42, 1, 2], 3)])[1].tokens == [4, 5, 6, 7]


def _sequential_used(windows, size):
    entries, used = {}, 0
    for ngram, nxt in windows:
        slot = lcg64_reference(ngram) % size
        used += slot in entries
        entries[slot] = nxt
    return used


def test_occupancy_reset_after_adding_a_prompt():
    size = 64
    prop = make(n=3, n_min=1, n_max=4, pool_size=size)
    prompt = [1, 2, 3, 4] * 4                      # 13 n-grams, 4 distinct: 9 overwrites
    windows = [(prompt[i:i + 3], prompt[i + 3]) for i in range(len(prompt) - 3)]
    used = _sequential_used(windows, size)
    assert used / size <= 0.25
    prop.begin(0, arr(prompt))
    assert prop.pool.used == used
    assert prop.draft([req(0, prompt, 1)])[0].tokens == [2, 3, 4, 1]
    # every request re-adds its whole prompt, so `used` keeps growing by overwrites
    prop.begin(1, arr(prompt))
    assert (used + len(windows)) / size > 0.25
    # the check runs after adding: the pool is wiped, including the prompt just added
    assert prop.pool.used == 0 and (prop.pool.entries == EMPTY).all()
    assert prop.draft([req(1, prompt, 1)]) == {}


def test_low_acceptance_streak_resets_the_pool():
    prop = make(n=3, n_min=1, n_max=4, n_slots=2)
    prompt = [1, 2, 3, 4, 5, 6, 7, 8] + list(range(20, 60))
    prop.begin(0, arr(prompt))
    prop.begin(1, arr([90, 91, 92, 93]))

    def draft_and_accept(n_accepted, is_other=False):
        assert prop.draft([req(0, prompt + [1, 2], 3)])[0].tokens == [4, 5, 6, 7]
        prop.accept(0, n_accepted, is_other)

    for _ in range(4):
        draft_and_accept(0)                 # 0/4 < 0.25
    assert prop.slots[0].n_low == 4
    draft_and_accept(1)                     # 1/4 = 0.25 is not low: the streak restarts
    assert prop.slots[0].n_low == 0
    for _ in range(4):
        draft_and_accept(0)
    draft_and_accept(3, is_other=True)      # another method's draft: ignored
    assert prop.slots[0].n_low == 4
    draft_and_accept(0)                     # fifth in a row: pool wiped for every slot, i_last = 0
    assert prop.slots[0].n_low == 0 and prop.slots[0].i_last == 0
    assert (prop.pool.entries == EMPTY).all() and prop.pool.used == 0
    # the next draft re-adds the whole history (more than 32 tokens behind i_last = 0)
    assert prop.draft([req(0, prompt + [1, 2], 3)])[0].tokens == [4, 5, 6, 7]
    assert prop.slots[0].i_last == len(prompt) + 2 - 3


def test_options_are_validated_and_max_draft():
    assert make(n=24, n_min=48, n_max=64).max_draft() == 64
    with pytest.raises(ValueError, match="--spec-ngram-mod-n-max must be in 1..1024"):
        make(n_max=2000)
    with pytest.raises(ValueError, match="--spec-ngram-mod-n-match must be in 1..1024"):
        make(n=0)


def test_native_pool_equals_the_numpy_and_python_one():
    """The native calls (kernels/native/ngram_mod.cpp) write the same entries and counts as the numpy add, and
    walk the same chains as the Python draft: same tokens, same breaks before n_min, wherever the window's
    oldest token comes from (the context, or the draft once past n)."""
    assert kernels.mode() == "native"
    rng = np.random.default_rng(3)
    history = rng.integers(0, 5, size=3000)          # five tokens: long chains, and breaks past what was added
    lengths = set()
    for n, size in ((3, 1 << 12), (24, 1 << 16), (1, 64)):
        pool, reference = NgramModPool(n, size=size), NgramModPool(n, size=size)
        for start, stop in ((0, 700), (700, 701), (701, 2000 - n)):
            pool.add_range(history, start, stop)
            reference._add_numpy(history, start, stop)
            assert np.array_equal(pool.entries, reference.entries) and pool.used == reference.used
        for start in rng.integers(1900, 2010, size=100):
            context = history[start - 30:start].tolist()
            for n_min, n_max in ((1, 64), (48, 64), (5, 9)):
                expected = pool._draft_python(context, n_min, n_max)
                assert pool.draft(context, n_min, n_max) == expected
                lengths.add(len(expected))
    assert {0, 9, 64} <= lengths and len(lengths) > 10
