"""ngram-map-k / ngram-map-k4v against hand-derived drafts and a plain-loop transcription."""
import numpy as np
import pytest

from support.ngram_map_reference import ReferenceMap, h32
from support.prompts import arr
from specserve.speculative.base import DraftRequest, ProposerContext
from specserve.speculative.ngram_map import KEY_MAP_SIZE, NgramMap, NgramMapK, NgramMapK4v, lcg32_hash, lcg32_hashes


def test_lcg32_hash_vectorised_equals_plain_loop():
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 200000, size=500)
    for n in (1, 2, 5, 12):
        got = lcg32_hashes(tokens, n, 3, 400)
        assert got.tolist() == [h32(tokens[j:j + n].tolist()) for j in range(3, 401)]
        assert lcg32_hash(tokens[7:7 + n]) == h32(tokens[7:7 + n].tolist())


def test_map_k_copies_after_the_match_and_accept_bounds_the_next_draft():
    # n=2, m=3: drafting needs >= 2n+m = 7 tokens; key = [last token, id_last]
    mp = NgramMap(2, 3, key_only=True, min_hits=1)
    prompt = arr([9, 1, 2, 3, 4, 5, 6, 7, 8, 0, 1])
    mp.begin(prompt)
    # key [1, 2]: the begin() prompt is searched in [1, L-n-m-1 = 5]; match at 1
    assert mp.draft(prompt, 2) == [3, 4, 5]
    mp.accept(2)                    # only 2 of 3 accepted: drafts from this key shrink to 2
    longer = arr([9, 1, 2, 3, 4, 5, 6, 7, 8, 0, 1, 2, 3, 4, 7, 1])
    assert mp.draft(longer, 2) == [3, 4]
    assert len(mp.keys) == 1 and mp.keys[0].key_num == 2       # key hits count lookups
    mp.accept(0)                    # nothing accepted: this key never drafts again
    assert mp.draft(arr(longer.tolist() + [2, 8, 1]), 2) == []
    assert mp.keys[0].key_num == 3


def test_too_short_history_and_no_match():
    mp = NgramMap(2, 3, True, 1)
    mp.begin(arr([1, 2, 1, 2, 1, 2]))
    assert mp.draft(arr([1, 2, 1, 2, 1, 2]), 1) == []        # 6 < 2n+m
    assert mp.draft(arr(list(range(10, 30))), 99) == []


def test_hash_probe_may_return_an_older_occurrence():
    # n=2, m=2: key [1, 2] occurs at 1 and 6 in the prompt
    prompt = [7, 1, 2, 10, 11, 12, 1, 2, 20, 21, 22, 23, 24]
    mp = NgramMap(2, 2, True, 1)
    mp.begin(arr(prompt))
    assert mp.draft(arr(prompt), 25) == []           # hashes positions 8..1 (descending): 6 owns the slot
    assert mp.key_map[lcg32_hash([1, 2]) % KEY_MAP_SIZE] == 6
    # [1, 2] occurs again at 14; its hash slot is taken, so the probe still answers 6
    history = prompt + [25, 1, 2, 30, 31, 32, 33, 1]
    assert mp.draft(arr(history), 2) == [20, 21]
    assert mp.key_map[lcg32_hash([1, 2]) % KEY_MAP_SIZE] == 6


def test_map_k_ignores_min_hits():
    mp = NgramMap(2, 3, key_only=True, min_hits=5)
    prompt = arr([9, 1, 2, 3, 4, 5, 6, 7, 8, 0, 1])
    mp.begin(prompt)
    assert mp.draft(prompt, 2) == [3, 4, 5]


# k4v, n=2, m=2. Key [1, 2] at 1, 5, 9 followed by [5, 6], [5, 6], [7, 8].
K4V_PROMPT = [0, 1, 2, 5, 6, 1, 2, 5, 6, 1, 2, 7, 8, 9, 9, 9, 1]


@pytest.mark.parametrize("draft, expected", [("latest", [7, 8]), ("winner", [5, 6])])
def test_k4v_dominance_then_the_draft_mode_picks_the_tokens(draft, expected):
    mp = NgramMap(2, 2, key_only=False, min_hits=1, draft=draft)
    mp.begin(arr(K4V_PROMPT))
    # match = latest occurrence (9); counts [5,6]: 2, [7,8]: 1 -> 2 >= 2*1 -> [5, 6] wins the vote.
    # latest (llama.cpp) copies what follows the match, [7, 8]; winner copies the winning continuation
    assert mp.draft(arr(K4V_PROMPT), 2) == expected
    key = mp.keys[0]
    assert [(v.value_idx, v.value_num) for v in key.values] == [(3, 2), (11, 1), (0, 0), (0, 0)]
    assert key.stat_idx == 9 and key.key_num == 1
    mp.accept(1)                      # either way the winner's accepted length is the one updated
    assert key.values[0].n_accepted == 1 and key.values[1].n_accepted == 2


def test_k4v_ties_and_weak_majorities_do_not_draft():
    tie = [0, 1, 2, 5, 6, 1, 2, 7, 8, 1, 2, 5, 6, 1, 2, 7, 8, 9, 9, 9, 1]     # 2 vs 2
    mp = NgramMap(2, 2, False, 1)
    mp.begin(arr(tie))
    assert mp.draft(arr(tie), 2) == []
    assert [v.value_num for v in mp.keys[0].values] == [2, 2, 0, 0]
    weak = [0, 1, 2, 5, 6, 1, 2, 5, 6, 1, 2, 7, 8, 1, 2, 3, 4, 9, 9, 9, 1]    # 2 vs 1 + 1
    mp = NgramMap(2, 2, False, 1)
    mp.begin(arr(weak))
    assert mp.draft(arr(weak), 2) == []
    assert [v.value_num for v in mp.keys[0].values] == [2, 1, 1, 0]


def test_k4v_keeps_at_most_four_continuations():
    seq = [0]
    for cont in ([5, 5], [5, 5], [5, 5], [5, 5], [5, 5], [6, 6], [7, 7], [8, 8], [9, 9]):
        seq += [1, 2] + cont
    seq += [30, 31, 32, 1]
    mp = NgramMap(2, 2, False, 1)
    mp.begin(arr(seq))
    # [5,5] x5 dominates [6,6] + [7,7] + [8,8] = 3 (x2 = 6 > 5? no: 5 < 6) -> no draft;
    # the fifth distinct continuation [9, 9] is not counted
    assert mp.draft(arr(seq), 2) == []
    assert [(v.value_idx > 0, v.value_num) for v in mp.keys[0].values] == [(True, 5), (True, 1), (True, 1),
                                                                          (True, 1)]
    assert all(seq[v.value_idx:v.value_idx + 2] != [9, 9] for v in mp.keys[0].values)


def test_k4v_min_hits_and_inclusive_recount():
    mp = NgramMap(2, 2, False, min_hits=2)
    mp.begin(arr(K4V_PROMPT))
    assert mp.draft(arr(K4V_PROMPT), 2) == []         # first lookup: 1 hit < 2
    assert mp.keys[0].values[0].value_idx == 0        # nothing counted yet
    longer = K4V_PROMPT + [2, 5, 6, 3, 3, 3, 3, 1]    # a further [1, 2, 5, 6] at 16
    # second lookup: key_num 2; match found by the hash probe at 9 (older than 16);
    # counting runs over [0, 9]: 2x [5,6], 1x [7,8] -> a draft, of the tokens after the match at 9
    assert mp.draft(arr(longer), 2) == [7, 8]
    assert mp.keys[0].key_num == 2 and mp.keys[0].stat_idx == 9
    # third lookup counts [9, 9] again (stat_idx is re-counted): [7, 8] reaches 2 -> 2 < 2*2, no draft
    assert mp.draft(arr(longer + [9, 1]), 2) == []
    assert [v.value_num for v in mp.keys[0].values][:2] == [2, 2]


def test_shorter_second_prompt_is_cleaned_up_without_crashing():
    """llama.cpp aborted here (#21233, #23936): the new prompt is shorter than the last one."""
    rng = np.random.default_rng(3)
    n, m = 2, 3
    base = rng.integers(0, 6, size=40).tolist()
    mp = NgramMap(n, m, False, 1)
    mp.begin(arr(base[:30]))
    history = list(base[:30])
    for t in base[30:]:                 # "generation": one draft per new token
        mp.draft(arr(history), t)
        history.append(t)
    assert mp.keys and mp.key_map.max() > 20
    shorter = arr(history[:20])         # the next request repeats an earlier part of the conversation
    mp.begin(shorter)
    cleanup = 20 - n - m                 # llama.cpp's rule when the prompt shrank
    assert mp.key_map.max() < cleanup and mp.key_map_last_idx == cleanup - 1
    assert all(k.key_idx < cleanup for k in mp.keys)
    assert all(v.value_idx < cleanup for k in mp.keys for v in k.values)
    assert all(k.values[0].value_idx != 0 for k in mp.keys)
    assert (mp.size_last_begin, mp.idx_last_check) == (20, 20)
    # drafting on the new request works: key [10, 11] is found at 21 (region after the prompt)
    new = history[:20] + [7, 10, 11, 12, 13, 14, 15, 16, 10]
    assert mp.draft(arr(new), 11) == [12, 13, 14]


def test_unrelated_prompt_is_indexed_from_scratch():
    mp = NgramMap(2, 2, True, 1)
    first = list(range(100, 140))
    mp.begin(arr(first))
    mp.draft(arr(first), 7)
    assert mp.key_map_last_idx == 35
    second = [50, 1, 2, 3, 4] + list(range(60, 80)) + [1]     # longer than the first, shares nothing
    mp.begin(arr(second))
    assert mp.key_map.max() == 0 and mp.key_map_last_idx == 0 and not mp.keys
    assert mp.draft(arr(second), 2) == [3, 4]


def test_history_going_backwards_restarts_instead_of_aborting():
    mp = NgramMap(2, 2, True, 1)
    mp.begin(arr(list(range(50))))
    assert mp.draft(arr([5, 1, 2, 3, 4, 9, 9, 9, 1]), 2) == [3, 4]


def _replay_session(ours: NgramMap, ref: ReferenceMap, rng, unrelated: bool) -> None:
    """Four requests on one map: each prompt an earlier part of the conversation, the whole
    conversation and a new message, or (unrelated=True) sometimes a new text of any length."""
    history = rng.integers(0, 4, size=int(rng.integers(5, 40))).tolist()
    for request in range(4):
        ours.begin(arr(history))
        ref.begin(history)
        for _ in range(int(rng.integers(5, 40))):
            sampled = int(rng.integers(0, 4))
            got, want = ours.draft(arr(history), sampled), ref.draft(history, sampled)
            assert got == want, (request, len(history))
            n_acc = int(rng.integers(0, len(got) + 1)) if got else 0
            if got:
                ours.accept(n_acc)
                ref.accept(n_acc)
            history = history + [sampled] + (got[:n_acc] if got else [])
        choice = rng.random()
        if unrelated and choice < 0.4:
            history = rng.integers(0, 4, size=int(rng.integers(1, 2 * len(history)))).tolist()
        elif choice < 0.7:
            history = history[:int(rng.integers(1, len(history)))]
        else:
            history = history + rng.integers(0, 4, size=int(rng.integers(0, 10))).tolist()


@pytest.mark.parametrize("key_only, draft", [(True, "latest"), (False, "latest"), (False, "winner")])
def test_matches_plain_loop_transcription(key_only, draft):
    """Prompts that continue (or shorten) the conversation: begin check and trust agree with llama.cpp."""
    rng = np.random.default_rng({"latest": 11, "winner": 12}[draft] + key_only)
    for trial in range(12):
        n, m = int(rng.integers(1, 4)), int(rng.integers(1, 5))
        min_hits = int(rng.integers(1, 3))
        for begin in ("check", "trust"):
            state = rng.bit_generator.state
            _replay_session(NgramMap(n, m, key_only, min_hits, begin, draft),
                            ReferenceMap(n, m, key_only, min_hits, draft), rng, unrelated=False)
            if begin == "check":
                rng.bit_generator.state = state          # the same session again, with trust


@pytest.mark.parametrize("key_only", [True, False])
def test_trust_matches_llama_cpp_on_unrelated_prompts(key_only):
    """begin trust is llama.cpp's rule even where a new prompt does not continue the last one."""
    rng = np.random.default_rng(21 + key_only)
    for trial in range(24):
        n, m = int(rng.integers(1, 4)), int(rng.integers(1, 5))
        _replay_session(NgramMap(n, m, key_only, 1, "trust"), ReferenceMap(n, m, key_only, 1), rng,
                        unrelated=True)


def test_check_and_trust_differ_on_an_unrelated_longer_prompt():
    """llama.cpp (trust) leaves the first positions of an unrelated prompt that is longer than the last
    request unsearchable: they are below what the map hashed before. check indexes it from scratch."""
    first = list(range(100, 140))
    second = [50, 1, 2, 3, 4] + list(range(60, 80)) + [1]     # longer than the first, shares nothing
    drafts = {}
    for begin in ("check", "trust"):
        mp = NgramMap(2, 2, True, 1, begin)
        mp.begin(arr(first))
        mp.draft(arr(first), 7)
        mp.begin(arr(second))
        drafts[begin] = mp.draft(arr(second), 2)
    assert drafts == {"check": [3, 4], "trust": []}


def test_proposer_options_per_slot_maps_and_accept_routing():
    ctx = ProposerContext(target=None, n_slots=2, max_ctx=100,
                          options={"spec_ngram_map_k_size_n": 2, "spec_ngram_map_k_size_m": 3})
    prop = NgramMapK(ctx)
    assert prop.max_draft() == 3
    prompt = arr([9, 1, 2, 3, 4, 5, 6, 7, 8, 0, 1])
    prop.begin(0, prompt)
    prop.begin(1, arr(list(range(20, 31))))
    drafts = prop.draft([DraftRequest(0, 10, 11, 2, prompt), DraftRequest(1, 10, 11, 2, arr(list(range(20, 31))))])
    assert drafts[0].tokens == [3, 4, 5] and 1 not in drafts
    prop.accept(0, 1, is_other=True)             # another method's draft: no feedback
    assert prop.maps[0].keys[0].values[0].n_accepted == 3
    prop.accept(0, 1, is_other=False)
    assert prop.maps[0].keys[0].values[0].n_accepted == 1
    with pytest.raises(ValueError, match="size-n and -size-m must be >= 1"):
        NgramMapK(ProposerContext(None, 1, 10, {"spec_ngram_map_k_size_n": 0}))


def test_proposer_mode_options_reach_the_maps_and_bad_values_are_named():
    ctx = ProposerContext(None, 1, 100, {"spec_ngram_map_k4v_begin": "trust", "spec_ngram_map_k4v_draft": "winner"})
    mp = NgramMapK4v(ctx)._map(0)
    assert mp.trust_prefix and not mp.draft_latest
    defaults = NgramMapK4v(ProposerContext(None, 1, 100, {}))._map(0)
    assert not defaults.trust_prefix and defaults.draft_latest          # check, latest
    with pytest.raises(ValueError, match=r"--spec-ngram-map-k-begin must be one of check, trust, got 'maybe'"):
        NgramMapK(ProposerContext(None, 1, 10, {"spec_ngram_map_k_begin": "maybe"}))
    with pytest.raises(ValueError, match=r"--spec-ngram-map-k4v-draft must be one of latest, winner"):
        NgramMapK4v(ProposerContext(None, 1, 10, {"spec_ngram_map_k4v_draft": "best"}))
    assert not any(o.dest.endswith("_draft") for o in NgramMapK.options)     # only k4v votes
