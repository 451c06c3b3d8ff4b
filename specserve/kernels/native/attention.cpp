// Attention over the KV cache for rows of many slots: q/k RMS norm, rotary embedding, the cache
// write, then for every query row softmax(q K^T / sqrt(d)) V over keys [0, key_len) of its slot.
// A row's keys, their order and every reduction depend only on that row, never on the batch.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels.h"
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

// scores[j] = exp(scores[j] - max) for j < n; returns their sum (in blocks of 16, a fixed order)
float softmax_numerators(float* scores, int64_t n) {
    float mx = -INFINITY;
    for (int64_t j = 0; j < n; j++) mx = std::max(mx, scores[j]);
#ifdef SS_AVX512
    const __m512 vmx = _mm512_set1_ps(mx);
    __m512 acc = _mm512_setzero_ps();
    for (int64_t j = 0; j < n; j += 16) {
        const __mmask16 m = tail_mask(n - j);
        const __m512 e = _mm512_maskz_mov_ps(m, exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, scores + j), vmx)));
        _mm512_mask_storeu_ps(scores + j, m, e);
        acc = _mm512_add_ps(acc, e);
    }
    return _mm512_reduce_add_ps(acc);
#else
    float sum = 0.0f;
    for (int64_t j = 0; j < n; j++) {
        scores[j] = std::exp(scores[j] - mx);
        sum += scores[j];
    }
    return sum;
#endif
}

// out = sum_j p[j] * values[j] over j < n (even and odd keys summed apart, then together)
void weighted_values(const float* p, const float* values, int64_t n, int64_t d, float* out) {
#ifdef SS_AVX512
    if (d <= 128) {
        const int64_t chunks = (d + 15) / 16;
        __m512 even[8], odd[8];
        for (int c = 0; c < 8; c++) even[c] = odd[c] = _mm512_setzero_ps();
        int64_t j = 0;
        for (; j + 1 < n; j += 2) {
            const __m512 p0 = _mm512_set1_ps(p[j]), p1 = _mm512_set1_ps(p[j + 1]);
            const float* v0 = values + j * d;
            const float* v1 = v0 + d;
            for (int64_t c = 0; c < chunks; c++) {
                const __mmask16 m = tail_mask(d - c * 16);
                even[c] = _mm512_fmadd_ps(p0, _mm512_maskz_loadu_ps(m, v0 + c * 16), even[c]);
                odd[c] = _mm512_fmadd_ps(p1, _mm512_maskz_loadu_ps(m, v1 + c * 16), odd[c]);
            }
        }
        if (j < n) {
            const __m512 p0 = _mm512_set1_ps(p[j]);
            for (int64_t c = 0; c < chunks; c++)
                even[c] = _mm512_fmadd_ps(p0, _mm512_maskz_loadu_ps(tail_mask(d - c * 16), values + j * d + c * 16),
                                          even[c]);
        }
        for (int64_t c = 0; c < chunks; c++)
            _mm512_mask_storeu_ps(out + c * 16, tail_mask(d - c * 16), _mm512_add_ps(even[c], odd[c]));
        return;
    }
#endif
    for (int64_t i = 0; i < d; i++) {
        float even = 0.0f, odd = 0.0f;
        int64_t j = 0;
        for (; j + 1 < n; j += 2) {
            even += p[j] * values[j * d + i];
            odd += p[j + 1] * values[(j + 1) * d + i];
        }
        if (j < n) even += p[j] * values[j * d + i];
        out[i] = even + odd;
    }
}

// Keys are stored transposed in blocks of kKeyBlock positions ([d][16] per block), so the scores of
// 16 keys are d vector FMAs with no horizontal sums; values stay one row of d per position.
constexpr int64_t kKeyBlock = 16;
constexpr int kMaxUnits = 8;     // (query row, head) pairs that share one pass over the keys

inline int64_t key_block_offset(int64_t pos, int64_t d) { return (pos / kKeyBlock) * kKeyBlock * d + pos % kKeyBlock; }

struct AttentionTile {
    int64_t d;
    const float* keys_t;               // this slot and kv head
    const float* values;
    int n_units;
    const float* q[kMaxUnits];         // rotated query of each (row, head)
    float* out[kMaxUnits];
    int64_t n_keys[kMaxUnits];
};

#ifdef SS_AVX512
// scores of U units for n_blocks key blocks: per unit two accumulators (even and odd i) over the head dim
template <int U>
void score_blocks(const AttentionTile& t, float* scores, int64_t stride, int64_t n_blocks, float scale) {
    const int64_t d = t.d;
    for (int64_t b = 0; b < n_blocks; b++) {
        const float* kt = t.keys_t + b * kKeyBlock * d;
        __m512 even[U], odd[U];
#pragma GCC unroll 8
        for (int u = 0; u < U; u++) even[u] = odd[u] = _mm512_setzero_ps();
        int64_t i = 0;
        for (; i + 1 < d; i += 2) {
            const __m512 k0 = _mm512_loadu_ps(kt + i * kKeyBlock), k1 = _mm512_loadu_ps(kt + (i + 1) * kKeyBlock);
#pragma GCC unroll 8
            for (int u = 0; u < U; u++) {
                even[u] = _mm512_fmadd_ps(_mm512_set1_ps(t.q[u][i]), k0, even[u]);
                odd[u] = _mm512_fmadd_ps(_mm512_set1_ps(t.q[u][i + 1]), k1, odd[u]);
            }
        }
        if (i < d) {
            const __m512 k0 = _mm512_loadu_ps(kt + i * kKeyBlock);
#pragma GCC unroll 8
            for (int u = 0; u < U; u++) even[u] = _mm512_fmadd_ps(_mm512_set1_ps(t.q[u][i]), k0, even[u]);
        }
#pragma GCC unroll 8
        for (int u = 0; u < U; u++)
            _mm512_storeu_ps(scores + u * stride + b * kKeyBlock,
                             _mm512_mul_ps(_mm512_add_ps(even[u], odd[u]), _mm512_set1_ps(scale)));
    }
}
typedef void (*ScoreFn)(const AttentionTile&, float*, int64_t, int64_t, float);
#endif

// Every (row, head) unit gets softmax(q K^T / sqrt(d)) V over its own n_keys. Units share the loads of
// the key blocks; each unit's arithmetic is the same whatever the other units are.
void attend(const AttentionTile& t) {
    const int64_t d = t.d;
    int64_t max_keys = 0;
    for (int u = 0; u < t.n_units; u++) max_keys = std::max(max_keys, t.n_keys[u]);
    const int64_t n_blocks = (max_keys + kKeyBlock - 1) / kKeyBlock, stride = n_blocks * kKeyBlock;
    static thread_local std::vector<float> scores_buf;
    if ((int64_t)scores_buf.size() < kMaxUnits * stride) scores_buf.resize(kMaxUnits * stride);
    float* scores = scores_buf.data();
    const float scale = 1.0f / std::sqrt((float)d);
#ifdef SS_AVX512
    static const ScoreFn kScoreFns[kMaxUnits] = {score_blocks<1>, score_blocks<2>, score_blocks<3>, score_blocks<4>,
                                                 score_blocks<5>, score_blocks<6>, score_blocks<7>, score_blocks<8>};
    kScoreFns[t.n_units - 1](t, scores, stride, n_blocks, scale);
#else
    for (int64_t b = 0; b < n_blocks; b++) {
        const float* kt = t.keys_t + b * kKeyBlock * d;
        for (int u = 0; u < t.n_units; u++) {
            for (int l = 0; l < kKeyBlock; l++) {
                float even = 0.0f, odd = 0.0f;
                int64_t i = 0;
                for (; i + 1 < d; i += 2) {
                    even += t.q[u][i] * kt[i * kKeyBlock + l];
                    odd += t.q[u][i + 1] * kt[(i + 1) * kKeyBlock + l];
                }
                if (i < d) even += t.q[u][i] * kt[i * kKeyBlock + l];
                scores[u * stride + b * kKeyBlock + l] = (even + odd) * scale;
            }
        }
    }
#endif
    for (int u = 0; u < t.n_units; u++) {
        float* s = scores + u * stride;
        const int64_t n = t.n_keys[u];
        const float inv = 1.0f / softmax_numerators(s, n);
        float* out = t.out[u];
        weighted_values(s, t.values, n, d, out);
        for (int64_t i = 0; i < d; i++) out[i] *= inv;
    }
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

}  // namespace

void attention_layer(const ss_model& m, int layer, float* qkv, int64_t ld_qkv, int64_t n_rows, int64_t prefix_rows,
                     const ss_attn& a, float* ctx) {
    const int64_t d = m.head_dim, n_heads = m.n_heads, n_kv = m.n_kv_heads, group = n_heads / n_kv;
    const int64_t total = prefix_rows + n_rows, cap = a.capacity;
    const ss_layer& w = m.layers[layer];
    const int64_t layer_offset = (int64_t)layer * a.n_slots * n_kv * cap * d;
    float* k_cache = a.k_cache + layer_offset;
    float* v_cache = a.v_cache + layer_offset;

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
                const int64_t head = (slot * n_kv + h) * cap * d;
                float* k_dst = k_cache + head + key_block_offset(pos, d);
                for (int64_t i = 0; i < d; i++) k_dst[i * kKeyBlock] = k[i];
                std::memcpy(v_cache + head + pos * d, row + (n_heads + n_kv + h) * d, d * sizeof(float));
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
        tile.keys_t = k_cache + (slot * n_kv + g) * cap * d;
        tile.values = v_cache + (slot * n_kv + g) * cap * d;
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
