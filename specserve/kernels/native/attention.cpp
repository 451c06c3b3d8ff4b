// Attention over the KV cache for rows of many slots: q/k RMS norm, rotary embedding, the cache
// write, then for every query row softmax(q K^T / sqrt(d)) V over keys [0, key_len) of its slot
// (attend.cpp). A row's keys, their order and every reduction depend only on that row.
#include <algorithm>
#include <cmath>
#include <vector>

#include "attend.h"
#include "kernels.h"
#include "kv_store.h"
#include "pool.h"
#include "simd.h"

namespace ss {
namespace {

float sum_squares(const float* x, int64_t d) {
#ifdef SS_AVX512
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i < d; i += 16) {
        const __m512 v = _mm512_maskz_loadu_ps(tail_mask(d - i), x + i);
        acc = _mm512_fmadd_ps(v, v, acc);
    }
    return _mm512_reduce_add_ps(acc);
#else
    float s = 0.0f;
    for (int64_t i = 0; i < d; i++) s += x[i] * x[i];
    return s;
#endif
}

void norm_head(float* x, const float* weight, int64_t d, float eps) {
    const float r = 1.0f / std::sqrt(sum_squares(x, d) / (float)d + eps);
    for (int64_t i = 0; i < d; i++) x[i] = x[i] * r * weight[i];
}

// rotate_half layout: pairs (i, i + d/2)
void rope_head(float* x, const float* cos, const float* sin, int64_t d) {
    const int64_t half = d / 2;
    for (int64_t i = 0; i < half; i++) {
        const float a = x[i], b = x[i + half];
        x[i] = a * cos[i] - b * sin[i];
        x[i + half] = b * cos[i + half] + a * sin[i + half];
    }
}

// key rows into the transposed key blocks, value rows as they are, in the cache's element type
template <int KT, int VT>
void write_kv(void* k_head, void* v_head, int64_t pos, int64_t d, const float* k, const float* v) {
    auto* k_dst = static_cast<typename Kv<KT>::elem*>(k_head) + key_block_offset(pos, d);
    auto* v_dst = static_cast<typename Kv<VT>::elem*>(v_head) + pos * d;
    for (int64_t i = 0; i < d; i++) Kv<KT>::put(k_dst + i * kKeyBlock, k[i]);
    for (int64_t i = 0; i < d; i++) Kv<VT>::put(v_dst + i, v[i]);
}

typedef void (*WriteFn)(void*, void*, int64_t, int64_t, const float*, const float*);
const WriteFn kWrite[3][3] = {
    {write_kv<KV_F32, KV_F32>, write_kv<KV_F32, KV_F16>, write_kv<KV_F32, KV_BF16>},
    {write_kv<KV_F16, KV_F32>, write_kv<KV_F16, KV_F16>, write_kv<KV_F16, KV_BF16>},
    {write_kv<KV_BF16, KV_F32>, write_kv<KV_BF16, KV_F16>, write_kv<KV_BF16, KV_BF16>},
};

}  // namespace

void attention_layer(const ss_model& m, int layer, float* qkv, int64_t ld_qkv, int64_t n_rows, int64_t prefix_rows,
                     const ss_attn& a, float* ctx) {
    const int64_t d = m.head_dim, n_heads = m.n_heads, n_kv = m.n_kv_heads, group = n_heads / n_kv;
    const int64_t total = prefix_rows + n_rows, cap = a.capacity;
    const ss_layer& w = m.layers[layer];
    // byte addresses: keys and values may be stored in different element types
    const int64_t head_elems = cap * d, layer_elems = a.n_slots * n_kv * head_elems;
    const int64_t k_size = kv_bytes(a.k_type), v_size = kv_bytes(a.v_type);
    char* k_cache = static_cast<char*>(a.k_cache) + layer * layer_elems * k_size;
    char* v_cache = static_cast<char*>(a.v_cache) + layer * layer_elems * v_size;
    const WriteFn write = kWrite[a.k_type][a.v_type];

    // q/k norms, rope and the cache write, 16 rows per task
    parallel_for((total + 15) / 16, [&](int64_t chunk) {
        for (int64_t r = chunk * 16; r < std::min(total, chunk * 16 + 16); r++) {
            float* row = qkv + r * ld_qkv;
            const float* cos = a.cos + a.rope_index[r] * d;
            const float* sin = a.sin + a.rope_index[r] * d;
            if (r >= prefix_rows) {
                for (int64_t h = 0; h < n_heads; h++) {
                    if (w.q_norm) norm_head(row + h * d, w.q_norm, d, m.eps);
                    rope_head(row + h * d, cos, sin, d);
                }
            }
            const int64_t slot = a.row_slot[r], pos = a.row_pos[r];
            for (int64_t h = 0; h < n_kv; h++) {
                float* k = row + (n_heads + h) * d;
                if (w.k_norm) norm_head(k, w.k_norm, d, m.eps);
                rope_head(k, cos, sin, d);
                const int64_t head = (slot * n_kv + h) * head_elems;
                write(k_cache + head * k_size, v_cache + head * v_size, pos, d, k, row + (n_heads + n_kv + h) * d);
            }
        }
    });

    // query rows in tiles of consecutive rows of one slot; a task is (tile, kv head)
    static thread_local std::vector<int64_t> tile_starts;
    std::vector<int64_t>& tiles = tile_starts;     // the tasks on other threads read this thread's list
    tiles.clear();
    // heads of one kv head in chunks of at most kMaxUnits, rows in tiles that fill the units
    const int64_t head_chunks = (group + kMaxUnits - 1) / kMaxUnits, chunk_heads = (group + head_chunks - 1) / head_chunks;
    const int64_t tile_rows = std::max<int64_t>(1, kMaxUnits / chunk_heads);
    for (int64_t r = prefix_rows; r < total; r++) {
        if (tiles.empty() || a.row_slot[r] != a.row_slot[tiles.back()] || r - tiles.back() >= tile_rows)
            tiles.push_back(r);
    }
    const int64_t n_tiles = (int64_t)tiles.size();
    parallel_for(n_tiles * n_kv * head_chunks, [&](int64_t task) {
        const int64_t t = task / (n_kv * head_chunks), g = (task / head_chunks) % n_kv, hc = task % head_chunks;
        const int64_t r0 = tiles[t], r1 = t + 1 < n_tiles ? tiles[t + 1] : total;
        const int64_t slot = a.row_slot[r0];
        AttentionTile tile;
        tile.d = d;
        tile.k_type = a.k_type;
        tile.v_type = a.v_type;
        tile.keys_t = k_cache + (slot * n_kv + g) * head_elems * k_size;
        tile.values = v_cache + (slot * n_kv + g) * head_elems * v_size;
        tile.n_units = 0;
        for (int64_t r = r0; r < r1; r++) {
            for (int64_t j = hc * chunk_heads; j < std::min(group, (hc + 1) * chunk_heads); j++) {
                const int64_t h = g * group + j;
                tile.q[tile.n_units] = qkv + r * ld_qkv + h * d;
                tile.out[tile.n_units] = ctx + (r - prefix_rows) * n_heads * d + h * d;
                tile.n_keys[tile.n_units] = a.key_len ? a.key_len[r] : a.row_pos[r] + 1;
                tile.n_units++;
            }
        }
        attend(tile);
    });
}

}  // namespace ss
