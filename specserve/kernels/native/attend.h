// One attention tile: softmax(q K^T / sqrt(d)) V for up to kMaxUnits (query row, head) pairs of one
// slot and key-value head, over that slot's cached keys. Keys are stored transposed in blocks of
// kKeyBlock positions ([d][16] per block), so 16 scores are d vector FMAs with no horizontal sums;
// values stay one row of d per position.
#pragma once
#include <cstdint>

namespace ss {

constexpr int64_t kKeyBlock = 16;
constexpr int kMaxUnits = 8;     // (query row, head) pairs that share one pass over the keys

// element offset of position pos's key element 0 in a head's transposed key blocks (element i: + i * 16)
inline int64_t key_block_offset(int64_t pos, int64_t d) { return (pos / kKeyBlock) * kKeyBlock * d + pos % kKeyBlock; }

struct AttentionTile {
    int64_t d;
    int k_type, v_type;                // KvType of the cache's keys and values
    const void* keys_t;                // this slot and kv head
    const void* values;
    int n_units;
    const float* q[kMaxUnits];         // rotated query of each (row, head)
    float* out[kMaxUnits];
    int64_t n_keys[kMaxUnits];         // keys [0, n_keys) of the slot
};

// Every unit's arithmetic is the same whatever the other units are: its scores, softmax and
// weighted sum depend on its own query and keys only (the basis of batch invariance).
void attend(const AttentionTile& t);

}  // namespace ss
