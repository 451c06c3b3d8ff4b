// The attention tile kernel, for every pair of key and value storage types.
#include "attend.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kv_store.h"
#include "simd.h"

namespace ss {
namespace {

// scores[j] = exp(scores[j] - max) for j < n; returns their sum (in vector lanes, then a fixed order)
float softmax_numerators(float* scores, int64_t n) {
    const float mx = row_max(scores, n);
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
#elif defined(SS_AVX2)
    const __m256 vmx = _mm256_set1_ps(mx);
    __m256 acc = _mm256_setzero_ps();
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        const __m256 e = exp256(_mm256_sub_ps(_mm256_loadu_ps(scores + j), vmx));
        _mm256_storeu_ps(scores + j, e);
        acc = _mm256_add_ps(acc, e);
    }
    if (j < n) {        // the tail through the same exp, the lanes past n dropped
        alignas(32) float tail[8];
        for (int64_t l = 0; l < 8; l++) tail[l] = j + l < n ? scores[j + l] : mx;
        const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        const __m256 keep = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32((int)(n - j)), lane));
        const __m256 e = _mm256_and_ps(exp256(_mm256_sub_ps(_mm256_load_ps(tail), vmx)), keep);
        _mm256_store_ps(tail, e);
        for (int64_t l = 0; j + l < n; l++) scores[j + l] = tail[l];
        acc = _mm256_add_ps(acc, e);
    }
    return reduce_sum8(acc);
#else
    float sum = 0.0f;
    for (int64_t j = 0; j < n; j++) {
        scores[j] = std::exp(scores[j] - mx);
        sum += scores[j];
    }
    return sum;
#endif
}

// out = sum_j p[j] * values[j] over j < n (even and odd keys summed apart, then together); the
// portable path (the AVX-512 one takes units together, below)
template <int VT>
void weighted_values(const float* p, const typename Kv<VT>::elem* values, int64_t n, int64_t d, float* out) {
    for (int64_t i = 0; i < d; i++) {
        float even = 0.0f, odd = 0.0f;
        int64_t j = 0;
        for (; j + 1 < n; j += 2) {
            even += p[j] * Kv<VT>::get(values + j * d + i);
            odd += p[j + 1] * Kv<VT>::get(values + (j + 1) * d + i);
        }
        if (j < n) even += p[j] * Kv<VT>::get(values + j * d + i);
        out[i] = even + odd;
    }
}

#ifdef SS_AVX512
// out[u] = sum_j p[u][j] * values[j] for U units in ONE pass over the values (each value row is
// loaded once for all units). Per unit one accumulator per 16 lanes, keys in order: a unit's
// arithmetic does not depend on which units share the pass (batch invariance); units with fewer
// keys than n have zero weights past their own (adding 0 * v changes nothing). CH (the 16-lane
// chunks of d) is a template argument so that the U x CH accumulators live in registers: with a
// run-time count they went through the stack, and this pass cost three times the scores'.
template <int VT, int U, int CH>
void weighted_values_units(const float* p, int64_t stride, const typename Kv<VT>::elem* values, int64_t n,
                           int64_t d, float* const* out) {
    __m512 acc[U][CH];
    __mmask16 masks[CH];
#pragma GCC unroll 8
    for (int c = 0; c < CH; c++) {
        masks[c] = tail_mask(d - c * 16);
#pragma GCC unroll 4
        for (int u = 0; u < U; u++) acc[u][c] = _mm512_setzero_ps();
    }
    for (int64_t j = 0; j < n; j++) {
        const auto* v = values + j * d;
        __m512 pj[U];
#pragma GCC unroll 4
        for (int u = 0; u < U; u++) pj[u] = _mm512_set1_ps(p[u * stride + j]);
#pragma GCC unroll 8
        for (int c = 0; c < CH; c++) {
            const __m512 vc = Kv<VT>::load(masks[c], v + c * 16);
#pragma GCC unroll 4
            for (int u = 0; u < U; u++) acc[u][c] = _mm512_fmadd_ps(pj[u], vc, acc[u][c]);
        }
    }
#pragma GCC unroll 4
    for (int u = 0; u < U; u++)
#pragma GCC unroll 8
        for (int c = 0; c < CH; c++) _mm512_mask_storeu_ps(out[u] + c * 16, masks[c], acc[u][c]);
}

typedef void (*WeightedFn)(const float*, int64_t, const void*, int64_t, int64_t, float* const*);
template <int VT, int U, int CH>
void weighted_erased(const float* p, int64_t stride, const void* values, int64_t n, int64_t d, float* const* out) {
    weighted_values_units<VT, U, CH>(p, stride, static_cast<const typename Kv<VT>::elem*>(values), n, d, out);
}

// [units - 1][chunks - 1]: up to 4 units at up to 4 chunks (d <= 64), up to 2 at up to 8 (d <= 128)
#define SS_WEIGHTED_ROW(VT, U) {weighted_erased<VT, U, 1>, weighted_erased<VT, U, 2>, weighted_erased<VT, U, 3>, \
    weighted_erased<VT, U, 4>, weighted_erased<VT, U, 5>, weighted_erased<VT, U, 6>, weighted_erased<VT, U, 7>, \
    weighted_erased<VT, U, 8>}
template <int VT>
struct WeightedTable {
    static constexpr WeightedFn fns[4][8] = {SS_WEIGHTED_ROW(VT, 1), SS_WEIGHTED_ROW(VT, 2), SS_WEIGHTED_ROW(VT, 3),
                                             SS_WEIGHTED_ROW(VT, 4)};
};
#undef SS_WEIGHTED_ROW
#endif

#ifdef SS_AVX2
// out[c * 8 ..] = sum_j p[j] * values[j][c * 8 ..] for CH 8-lane chunks: one accumulator per chunk,
// keys in order (CH a template argument, so the accumulators live in registers)
template <int VT, int CH>
void weighted_chunks(const float* p, const void* values_, int64_t n, int64_t d, float* out) {
    const auto* values = static_cast<const typename Kv<VT>::elem*>(values_);
    __m256 acc[CH];
#pragma GCC unroll 8
    for (int c = 0; c < CH; c++) acc[c] = _mm256_setzero_ps();
    for (int64_t j = 0; j < n; j++) {
        const __m256 pj = _mm256_broadcast_ss(p + j);
#pragma GCC unroll 8
        for (int c = 0; c < CH; c++) acc[c] = _mm256_fmadd_ps(pj, Kv<VT>::load8(values + j * d + c * 8), acc[c]);
    }
#pragma GCC unroll 8
    for (int c = 0; c < CH; c++) _mm256_storeu_ps(out + c * 8, acc[c]);
}

typedef void (*ChunksFn)(const float*, const void*, int64_t, int64_t, float*);
template <int VT>
struct ChunksTable {
    static constexpr ChunksFn fns[8] = {weighted_chunks<VT, 1>, weighted_chunks<VT, 2>, weighted_chunks<VT, 3>,
                                        weighted_chunks<VT, 4>, weighted_chunks<VT, 5>, weighted_chunks<VT, 6>,
                                        weighted_chunks<VT, 7>, weighted_chunks<VT, 8>};
};

// G units' scores for lanes 8h .. 8h+7 of one key block: per unit two accumulators (even and odd i)
template <int KT, int G>
void score_half(const AttentionTile& t, int u0, int h, const typename Kv<KT>::elem* kt, float* scores, int64_t stride,
                float scale) {
    const int64_t d = t.d;
    __m256 even[G], odd[G];
#pragma GCC unroll 4
    for (int g = 0; g < G; g++) even[g] = odd[g] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 1 < d; i += 2) {
        const __m256 k0 = Kv<KT>::load8(kt + i * kKeyBlock + h * 8);
        const __m256 k1 = Kv<KT>::load8(kt + (i + 1) * kKeyBlock + h * 8);
#pragma GCC unroll 4
        for (int g = 0; g < G; g++) {
            even[g] = _mm256_fmadd_ps(_mm256_broadcast_ss(t.q[u0 + g] + i), k0, even[g]);
            odd[g] = _mm256_fmadd_ps(_mm256_broadcast_ss(t.q[u0 + g] + i + 1), k1, odd[g]);
        }
    }
    if (i < d) {
        const __m256 k0 = Kv<KT>::load8(kt + i * kKeyBlock + h * 8);
#pragma GCC unroll 4
        for (int g = 0; g < G; g++) even[g] = _mm256_fmadd_ps(_mm256_broadcast_ss(t.q[u0 + g] + i), k0, even[g]);
    }
#pragma GCC unroll 4
    for (int g = 0; g < G; g++)
        _mm256_storeu_ps(scores + (u0 + g) * stride + h * 8,
                         _mm256_mul_ps(_mm256_add_ps(even[g], odd[g]), _mm256_set1_ps(scale)));
}
#endif

// scores of U units for n_blocks key blocks: per unit two accumulators (even and odd i) over the head dim
template <int KT, int U>
void score_blocks(const AttentionTile& t, float* scores, int64_t stride, int64_t n_blocks, float scale) {
    const int64_t d = t.d;
    const auto* keys = static_cast<const typename Kv<KT>::elem*>(t.keys_t);
    for (int64_t b = 0; b < n_blocks; b++) {
        const auto* kt = keys + b * kKeyBlock * d;
#ifdef SS_AVX512
        __m512 even[U], odd[U];
#pragma GCC unroll 8
        for (int u = 0; u < U; u++) even[u] = odd[u] = _mm512_setzero_ps();
        int64_t i = 0;
        for (; i + 1 < d; i += 2) {
            const __m512 k0 = Kv<KT>::load16(kt + i * kKeyBlock), k1 = Kv<KT>::load16(kt + (i + 1) * kKeyBlock);
#pragma GCC unroll 8
            for (int u = 0; u < U; u++) {
                even[u] = _mm512_fmadd_ps(_mm512_set1_ps(t.q[u][i]), k0, even[u]);
                odd[u] = _mm512_fmadd_ps(_mm512_set1_ps(t.q[u][i + 1]), k1, odd[u]);
            }
        }
        if (i < d) {
            const __m512 k0 = Kv<KT>::load16(kt + i * kKeyBlock);
#pragma GCC unroll 8
            for (int u = 0; u < U; u++) even[u] = _mm512_fmadd_ps(_mm512_set1_ps(t.q[u][i]), k0, even[u]);
        }
#pragma GCC unroll 8
        for (int u = 0; u < U; u++)
            _mm512_storeu_ps(scores + u * stride + b * kKeyBlock,
                             _mm512_mul_ps(_mm512_add_ps(even[u], odd[u]), _mm512_set1_ps(scale)));
#elif defined(SS_AVX2)
        // units in groups of up to 4, each half block apart: 8 accumulators stay in registers
        for (int u0 = 0; u0 < U; u0 += 4)
            for (int h = 0; h < 2; h++) {
                float* s = scores + b * kKeyBlock;
                switch (std::min(U - u0, 4)) {
                    case 1: score_half<KT, 1>(t, u0, h, kt, s, stride, scale); break;
                    case 2: score_half<KT, 2>(t, u0, h, kt, s, stride, scale); break;
                    case 3: score_half<KT, 3>(t, u0, h, kt, s, stride, scale); break;
                    default: score_half<KT, 4>(t, u0, h, kt, s, stride, scale); break;
                }
            }
#else
        for (int u = 0; u < U; u++) {
            for (int l = 0; l < kKeyBlock; l++) {
                float even = 0.0f, odd = 0.0f;
                int64_t i = 0;
                for (; i + 1 < d; i += 2) {
                    even += t.q[u][i] * Kv<KT>::get(kt + i * kKeyBlock + l);
                    odd += t.q[u][i + 1] * Kv<KT>::get(kt + (i + 1) * kKeyBlock + l);
                }
                if (i < d) even += t.q[u][i] * Kv<KT>::get(kt + i * kKeyBlock + l);
                scores[u * stride + b * kKeyBlock + l] = (even + odd) * scale;
            }
        }
#endif
    }
}

typedef void (*ScoreFn)(const AttentionTile&, float*, int64_t, int64_t, float);

template <int KT>
struct ScoreTable {
    static constexpr ScoreFn fns[kMaxUnits] = {score_blocks<KT, 1>, score_blocks<KT, 2>, score_blocks<KT, 3>,
                                               score_blocks<KT, 4>, score_blocks<KT, 5>, score_blocks<KT, 6>,
                                               score_blocks<KT, 7>, score_blocks<KT, 8>};
};

template <int KT, int VT>
void attend_typed(const AttentionTile& t) {
    const int64_t d = t.d;
    int64_t max_keys = 0;
    for (int u = 0; u < t.n_units; u++) max_keys = std::max(max_keys, t.n_keys[u]);
    const int64_t n_blocks = (max_keys + kKeyBlock - 1) / kKeyBlock, stride = n_blocks * kKeyBlock;
    static thread_local std::vector<float> scores_buf;
    if ((int64_t)scores_buf.size() < kMaxUnits * stride) scores_buf.resize(kMaxUnits * stride);
    float* scores = scores_buf.data();
    ScoreTable<KT>::fns[t.n_units - 1](t, scores, stride, n_blocks, 1.0f / std::sqrt((float)d));
    const auto* values = static_cast<const typename Kv<VT>::elem*>(t.values);
#ifdef SS_AVX512
    if (d <= 128) {       // the units share passes over the values, 4 (d <= 64) or 2 at a time
        const int64_t chunks = (d + 15) / 16;
        float inv[kMaxUnits];
        for (int u = 0; u < t.n_units; u++) {
            float* s = scores + u * stride;
            inv[u] = 1.0f / softmax_numerators(s, t.n_keys[u]);
            std::fill(s + t.n_keys[u], s + max_keys, 0.0f);
        }
        const int group = d <= 64 ? 4 : 2;
        for (int u0 = 0; u0 < t.n_units; u0 += group) {
            const int n_group = std::min(group, t.n_units - u0);
            int64_t n = 0;
            for (int u = u0; u < u0 + n_group; u++) n = std::max(n, t.n_keys[u]);
            WeightedTable<VT>::fns[n_group - 1][chunks - 1](scores + u0 * stride, stride, t.values, n, d,
                                                           t.out + u0);
        }
        for (int u = 0; u < t.n_units; u++)
            for (int64_t i = 0; i < d; i++) t.out[u][i] *= inv[u];
        return;
    }
#endif
#ifdef SS_AVX2
    if (d % 8 == 0) {        // passes of up to 8 chunks (64 lanes) over the values
        for (int u = 0; u < t.n_units; u++) {
            float* s = scores + u * stride;
            const float inv = 1.0f / softmax_numerators(s, t.n_keys[u]);
            for (int64_t c0 = 0; c0 < d / 8; c0 += 8)
                ChunksTable<VT>::fns[std::min<int64_t>(8, d / 8 - c0) - 1](
                    s, static_cast<const typename Kv<VT>::elem*>(t.values) + c0 * 8, t.n_keys[u], d, t.out[u] + c0 * 8);
            for (int64_t i = 0; i < d; i++) t.out[u][i] *= inv;
        }
        return;
    }
#endif
    for (int u = 0; u < t.n_units; u++) {
        float* s = scores + u * stride;
        const int64_t n = t.n_keys[u];
        const float inv = 1.0f / softmax_numerators(s, n);
        float* out = t.out[u];
        weighted_values<VT>(s, values, n, d, out);
        for (int64_t i = 0; i < d; i++) out[i] *= inv;
    }
}

typedef void (*AttendFn)(const AttentionTile&);
const AttendFn kAttend[3][3] = {
    {attend_typed<KV_F32, KV_F32>, attend_typed<KV_F32, KV_F16>, attend_typed<KV_F32, KV_BF16>},
    {attend_typed<KV_F16, KV_F32>, attend_typed<KV_F16, KV_F16>, attend_typed<KV_F16, KV_BF16>},
    {attend_typed<KV_BF16, KV_F32>, attend_typed<KV_BF16, KV_F16>, attend_typed<KV_BF16, KV_BF16>},
};

}  // namespace

void attend(const AttentionTile& t) { kAttend[t.k_type][t.v_type](t); }

}  // namespace ss
