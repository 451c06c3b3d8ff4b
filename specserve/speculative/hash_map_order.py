"""The order in which GCC's libstdc++ iterates a std::unordered_map filled by inserting keys one at a time
(no erases). llama.cpp, built on Linux, iterates such maps where the order shows: ngram-cache gives a tie
to the first of equally scored tokens in a map of int32 tokens (common/ngram-cache.cpp, try_draft), and
llama-lookup-create writes its cache file in the iteration order of a map of n-grams and of each
n-gram's map of tokens (common_ngram_cache_save). The order follows from the insertion order alone:

* a key's bucket is its hash modulo the bucket count; the hash of an int is the int (as size_t), the hash
  of an n-gram llama.cpp's own (ngram_hash);
* the table starts with 13 buckets and, when an insert would make the elements outnumber the buckets,
  grows to the next size of libstdc++'s prime list at least twice as large (GROWTH) and relinks every
  node, in list order, at the front of its new bucket or at the front of the list if the bucket is new;
* a new key goes to the front of its bucket, or to the front of the whole list if its bucket is empty.

tests/test_hash_map_order.py checks this against the real libstdc++ with g++.
"""
from __future__ import annotations

# bucket counts of a table grown one insert at a time (libstdc++'s _Prime_rehash_policy, max load 1.0)
GROWTH = (13, 29, 59, 127, 257, 541, 1109, 2357, 5087, 10273, 20753, 42043, 85229, 172933, 351061, 712697,
          1447153, 2938679, 5967347, 12117689, 24607243, 49969847, 101473717, 206062531, 418451333, 849749479,
          1725587117, 3504151727)
TOKEN_HASH_FACTOR = 11400714819323198485      # llama.cpp's token hash in an n-gram (Fibonacci hashing)
_END = object()
_HEAD = object()         # the list's "before begin" node
_SIZE_T = (1 << 64) - 1


def int_hash(key: int) -> int:
    """std::hash<int>: the int, as size_t (a negative int wraps)."""
    return key & _SIZE_T


def ngram_hash(ngram) -> int:
    """llama.cpp's common_ngram_hash_function: the XOR of each token (as size_t) times TOKEN_HASH_FACTOR."""
    h = 0
    for token in ngram:
        h ^= (int(token) * TOKEN_HASH_FACTOR) & _SIZE_T
    return h


def iteration_order(keys, hash_fn=int_hash) -> list:
    """The keys (distinct, in insertion order) in the order libstdc++ iterates them."""
    keys = list(keys)
    if len(keys) > GROWTH[-1]:
        raise ValueError(f"{len(keys)} keys: beyond the bucket counts this emulation knows ({GROWTH[-1]})")
    hashes = {key: hash_fn(key) for key in keys}
    nxt: dict = {_HEAD: _END}               # singly linked list
    before: dict[int, object] = {}          # bucket -> the node before its first node
    n_buckets = 0
    for count, key in enumerate(keys):
        if count + 1 > n_buckets:
            n_buckets = GROWTH[GROWTH.index(n_buckets) + 1] if n_buckets else GROWTH[0]
            nxt, before = _relink(nxt, n_buckets, hashes)
        _link(nxt, before, key, hashes, n_buckets)
    order, node = [], nxt[_HEAD]
    while node is not _END:
        order.append(node)
        node = nxt[node]
    return order


def _link(nxt: dict, before: dict, node, hashes: dict, n_buckets: int) -> None:
    """Put node first in its bucket; a node of an empty bucket goes to the front of the whole list, and
    the bucket of the node that was first now starts after it (libstdc++'s insert and rehash both)."""
    b = hashes[node] % n_buckets
    if b in before:
        prev = before[b]
        nxt[node], nxt[prev] = nxt[prev], node
    else:
        nxt[node], nxt[_HEAD] = nxt[_HEAD], node
        if nxt[node] is not _END:
            before[hashes[nxt[node]] % n_buckets] = node
        before[b] = _HEAD


def _relink(old: dict, n_buckets: int, hashes: dict) -> tuple[dict, dict]:
    """A rehash: every node, in the old list's order, into the new buckets."""
    nxt: dict = {_HEAD: _END}
    before: dict[int, object] = {}
    node = old[_HEAD]
    while node is not _END:
        following = old[node]
        _link(nxt, before, node, hashes, n_buckets)
        node = following
    return nxt, before
