"""The emulated iteration order of GCC's std::unordered_map (speculative/hash_map_order.py): small cases by
hand, then random insertion sequences against the real libstdc++, compiled with g++."""
import random
import shutil
import subprocess

import pytest

from specserve.speculative.hash_map_order import GROWTH, iteration_order, ngram_hash
from specserve.speculative.ngram_cache_store import NgramCache, cache_draft, ngram_key


def test_new_keys_go_to_the_front_of_their_bucket_or_of_the_list():
    assert iteration_order([]) == []
    assert iteration_order([1, 2]) == [2, 1]              # two buckets: the newest heads the list
    assert iteration_order([5, 18, 31]) == [31, 18, 5]    # 13 buckets: one bucket, newest first
    # 7 lands in an empty bucket (list front); 20 joins 7's bucket, right before 7
    assert iteration_order([3, 7, 20]) == [20, 7, 3]
    assert iteration_order([3, 16, 7]) == [7, 16, 3]


def test_growth_relinks_in_list_order():
    keys = list(range(14))          # the 14th key grows the table from 13 to 29 buckets
    assert GROWTH[:2] == (13, 29)
    # before growing, 0..12 sit one per bucket in reverse order: 12, 11, ..., 0. Relinking walks that list
    # and puts each key at the front of the list (all buckets new): 0, 1, ..., 12; then 13 goes first
    assert iteration_order(keys) == [13] + list(range(13))


def test_ngram_cache_ties_follow_the_order_the_tokens_were_counted_in():
    empty = NgramCache()
    ctx = NgramCache()
    # a 3-gram seen once before 30 and once before 3: 50 % each, enough for the lax threshold, a tie
    ctx.table[ngram_key([4, 4, 4])] = {30: 1, 3: 1}          # 30 counted first
    assert iteration_order([30, 3]) == [3, 30]               # 3's bucket was empty: it heads the list
    assert cache_draft([4, 4, 4], 1, ctx, empty, empty, ties="libstdc++") == [3]
    ctx = NgramCache()
    ctx.table[ngram_key([4, 4, 4])] = {3: 1, 30: 1}          # 3 counted first: 30 heads the list
    assert cache_draft([4, 4, 4], 1, ctx, empty, empty, ties="libstdc++") == [30]
    assert cache_draft([4, 4, 4], 1, ctx, empty, empty, ties="lowest-id") == [3]


def test_cache_file_in_libstdcxx_order_and_back():
    cache = NgramCache()
    cache.update([5, 6, 5, 7, 8, 5, 6], 2, 2, 7)
    records = NgramCache.from_bytes(cache.to_bytes("libstdc++")).table
    assert list(records) == iteration_order(list(cache.table), ngram_hash)
    assert all(list(records[g]) == iteration_order(list(cache.table[g])) for g in records)
    assert records == cache.table
    again = NgramCache.from_bytes(cache.to_bytes("libstdc++"))
    assert again.to_bytes() == cache.to_bytes("libstdc++")          # a loaded file saves as it was
    with pytest.raises(ValueError, match="unknown n-gram cache file order 'sorted'"):
        cache.to_bytes("sorted")


CXX = r"""
#include <cstdio>
#include <unordered_map>
// input lines: "i n k1..kn" (n int keys) or "g n a1 b1 c1 d1 ..." (n 4-token n-grams, the n-gram hash)
struct Gram { int t[4]; bool operator==(const Gram & o) const {
    for (int i = 0; i < 4; ++i) if (t[i] != o.t[i]) return false; return true; } };
struct GramHash { size_t operator()(const Gram & g) const {
    size_t h = (size_t) g.t[0] * 11400714819323198485llu;
    for (int i = 1; i < 4; ++i) h ^= (size_t) g.t[i] * 11400714819323198485llu;
    return h; } };
int main() {
    char kind; int n;
    while (scanf(" %c %d", &kind, &n) == 2) {
        if (kind == 'i') {
            std::unordered_map<int, int> m;
            for (int i = 0; i < n; ++i) { int k; scanf("%d", &k); m.emplace(k, i); }
            for (auto & kv : m) printf("%d ", kv.first);
        } else {
            std::unordered_map<Gram, int, GramHash> m;
            for (int i = 0; i < n; ++i) { Gram g; for (int j = 0; j < 4; ++j) scanf("%d", &g.t[j]); m.emplace(g, i); }
            for (auto & kv : m) printf("%d %d %d %d ", kv.first.t[0], kv.first.t[1], kv.first.t[2], kv.first.t[3]);
        }
        printf("\n");
    }
}
"""


@pytest.mark.slow
def test_matches_libstdcxx(tmp_path):
    if shutil.which("g++") is None:
        pytest.skip("needs g++ to build the reference program")
    (tmp_path / "order.cpp").write_text(CXX)
    subprocess.run(["g++", "-O1", "-o", str(tmp_path / "order"), str(tmp_path / "order.cpp")], check=True)
    rng = random.Random(7)
    cases = []
    for _ in range(150):
        n = rng.choice([0, 1, 12, 13, 14, 29, 30, 59, 60, 300, 2000, 6000])
        hi = rng.choice([40, 5000, 200000])
        if rng.random() < 0.5:
            cases.append(("i", rng.sample(range(-20, hi), min(n, hi + 20))))
        else:
            grams = {tuple(rng.randrange(-1, 60) for _ in range(4)) for _ in range(n)}
            cases.append(("g", list(grams)))
    text = "".join(f"{kind} {len(keys)} " + " ".join(" ".join(map(str, k)) if kind == "g" else str(k)
                                                        for k in keys) + "\n" for kind, keys in cases)
    out = subprocess.run([str(tmp_path / "order")], input=text, capture_output=True, text=True, check=True)
    for (kind, keys), line in zip(cases, out.stdout.splitlines(), strict=True):
        values = [int(v) for v in line.split()]
        if kind == "i":
            assert iteration_order(keys) == values
        else:
            want = [tuple(values[i:i + 4]) for i in range(0, len(values), 4)]
            assert iteration_order(keys, ngram_hash) == want
