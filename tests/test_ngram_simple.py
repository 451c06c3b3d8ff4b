"""ngram-simple against hand-derived drafts (llama.cpp common_ngram_simple_draft semantics)."""
import numpy as np

from support.prompts import arr
from specserve.speculative.ngram_simple import find_last_ngram, ngram_simple_draft


def test_copies_what_followed_the_most_recent_match():
    # n=2: current n-gram = [tokens[-1], id_last] = [1, 2]
    tokens = arr([9, 1, 2, 3, 4, 5, 1, 2, 6, 7, 8, 0, 0, 1])
    # matches of [1, 2] at j=1 and j=6 -> the most recent (6) wins: copy tokens[8:8+m]
    assert ngram_simple_draft(tokens, 2, n=2, m=3) == [6, 7, 8]
    # m larger than what follows: copy_max = L - (match + n) = 14 - 8 = 6
    assert ngram_simple_draft(tokens, 2, n=2, m=10) == [6, 7, 8, 0, 0, 1]


def test_quirks_kept_for_parity():
    # position 0 never matches
    tokens = arr([1, 2, 7, 7, 7, 7, 7, 7, 7, 1])
    assert ngram_simple_draft(tokens, 2, n=2, m=2) == []
    # the history must be longer than n + m + 1
    assert ngram_simple_draft(arr([5, 1, 2, 3, 1]), 2, n=2, m=2) == []
    # fewer than n tokens after the match -> no draft
    tokens = arr([5, 5, 5, 5, 5, 5, 5, 5, 1, 2, 9, 1])
    assert ngram_simple_draft(tokens, 2, n=3, m=8) == []
    # runs of one token: the most recent match is right behind, with one token after it
    assert ngram_simple_draft(arr([4] * 30), 4, n=3, m=8) == []


def test_no_match():
    assert ngram_simple_draft(arr(list(range(40))), 99, n=3, m=5) == []


def test_vectorised_search_matches_a_plain_loop():
    rng = np.random.default_rng(0)
    for _ in range(300):
        tokens = rng.integers(0, 4, size=int(rng.integers(5, 60)))
        n = int(rng.integers(1, 4))
        pattern = rng.integers(0, 4, size=n)
        last = len(tokens) - n - 1
        expected = 0
        for j in range(last, 0, -1):
            if list(tokens[j:j + n]) == list(pattern):
                expected = j
                break
        assert find_last_ngram(tokens, pattern, last) == expected
