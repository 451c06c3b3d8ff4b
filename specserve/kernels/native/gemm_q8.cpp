// int8 weights times int8 rows (SS_W_Q8), the way llama.cpp's Q8_0 matmul treats activations: each
// row is rounded to int8 with its own scale (max |x| / 127, round to nearest even), the products are
// summed exactly in int32 and the sum is scaled by the row's and the column's scales. AVX-512 VNNI
// (vpdpbusd) multiplies unsigned by signed bytes, so rows are stored as q + 128 and 128 x the
// column's weight sum (kept at the head of each packed block) is taken off again. Integer sums are
// exact, so every kernel and tile shape gives the same bits, whatever the other rows (batch
// invariance). Compared with int8 weights on float rows (SS_W_I8, converted in registers), a row
// costs a quarter of the multiply instructions and the weights' bytes stay halved. Where the CPU has
// AMX int8 tiles (tdpbusd, the same unsigned-by-signed product), 8 rows and more run on them
// (gemm_amx.cpp): a 16-row tile costs about what 4 rows of vpdpbusd do.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <vector>

#include "gemm_internal.h"
#include "pool.h"

namespace ss {
namespace {

// Q8 products of this many rows and more run on AMX int8 tiles where the CPU has them (SPECSERVE_AMX_Q8_ROWS
// overrides; tiles and vpdpbusd give the same bits, so the choice is speed only)
int64_t amx_q8_min_rows() {
    static const int64_t rows = [] {
        const char* env = std::getenv("SPECSERVE_AMX_Q8_ROWS");
        return env ? std::atoll(env) : (int64_t)8;
    }();
    return rows;
}

// row -> (q + 128) bytes, k padded with 128 (a zero); returns the row's scale. The vector body rounds
// as the scalar tail does (to nearest even), so every build quantizes a row the same way.
float quantize_row(const float* x, int64_t k, int64_t kp, uint8_t* out) {
    float amax = 0.0f;
    int64_t i = 0;
#ifdef SS_AVX512
    __m512 vmax = _mm512_setzero_ps();
    for (; i + 16 <= k; i += 16) vmax = _mm512_max_ps(vmax, _mm512_abs_ps(_mm512_loadu_ps(x + i)));
    amax = _mm512_reduce_max_ps(vmax);
#elif defined(SS_AVX2)
    const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 vmax = _mm256_setzero_ps();
    for (; i + 8 <= k; i += 8) vmax = _mm256_max_ps(vmax, _mm256_and_ps(_mm256_loadu_ps(x + i), magnitude));
    amax = reduce_max8(vmax);
#endif
    for (; i < k; i++) amax = std::max(amax, std::fabs(x[i]));
    const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    i = 0;
#ifdef SS_AVX512
    const __m512 vinv = _mm512_set1_ps(inv);
    const __m512i lo = _mm512_set1_epi32(-127), hi = _mm512_set1_epi32(127), offset = _mm512_set1_epi32(128);
    for (; i + 16 <= k; i += 16) {
        const __m512i q = _mm512_cvt_roundps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + i), vinv),
                                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        const __m512i u = _mm512_add_epi32(_mm512_min_epi32(_mm512_max_epi32(q, lo), hi), offset);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm512_cvtepi32_epi8(u));
    }
#elif defined(SS_AVX2)
    // cvtps rounds to nearest even, as nearbyint does in the default rounding mode
    const __m256 vinv = _mm256_set1_ps(inv);
    const __m256i lo = _mm256_set1_epi32(-127), hi = _mm256_set1_epi32(127), offset = _mm256_set1_epi32(128);
    const __m256i low_bytes = _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                                               0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
    for (; i + 8 <= k; i += 8) {
        const __m256i q = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + i), vinv));
        const __m256i u = _mm256_add_epi32(_mm256_min_epi32(_mm256_max_epi32(q, lo), hi), offset);
        // each 32-bit value's low byte, then the two 128-bit halves' 4 bytes side by side
        const __m256i packed = _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(u, low_bytes),
                                                           _mm256_setr_epi32(0, 4, 0, 0, 0, 0, 0, 0));
        _mm_storel_epi64(reinterpret_cast<__m128i*>(out + i), _mm256_castsi256_si128(packed));
    }
#endif
    for (; i < k; i++) out[i] = (uint8_t)(std::clamp(std::nearbyint(x[i] * inv), -127.0f, 127.0f) + 128.0f);
    std::fill(out + k, out + kp, (uint8_t)128);
    return amax / 127.0f;
}

void gemm_q8_portable(const ss_weight& w, const uint8_t* xq, int64_t m, int64_t ldx, const Epilogue& e) {
    const int64_t bb = block_bytes(w.type, w.k), kp = k_padded(w.type, w.k);
    const auto* base = static_cast<const uint8_t*>(w.data);
    portable_blocks(w, m, e, [&](int64_t b, int64_t r, float* acc) {
        const uint8_t* block = base + b * bb;
        const auto* sums = reinterpret_cast<const int32_t*>(block);
        const auto* q = reinterpret_cast<const int8_t*>(block + Q8_SUMS_BYTES);
        for (int l = 0; l < NB; l++) {
            int32_t sum = 0;
            for (int64_t kk = 0; kk < kp; kk++) sum += (int32_t)xq[r * ldx + kk] * q[(kk / 4) * NB * 4 + l * 4 + kk % 4];
            acc[l] = (float)(sum - 128 * sums[l]) * e.row_scales[r] * e.scales[b * NB + l];
            if (e.bias) acc[l] += e.bias[b * NB + l];
        }
    });
}

}  // namespace

void pack_q8_block(const int8_t* src, int64_t n, int64_t k, int64_t block, uint8_t* dst) {
    const int64_t kp = k_padded(SS_W_Q8, k);
    auto* sums = reinterpret_cast<int32_t*>(dst);
    auto* q = reinterpret_cast<int8_t*>(dst + Q8_SUMS_BYTES);
    for (int l = 0; l < NB; l++) {
        const int64_t row = block * NB + l;
        sums[l] = 0;
        for (int64_t kk = 0; kk < kp; kk++) {
            const int8_t v = row < n && kk < k ? src[row * k + kk] : 0;
            q[(kk / 4) * NB * 4 + l * 4 + kk % 4] = v;
            sums[l] += v;
        }
    }
}

void gemm_q8(const ss_weight& w, const float* x, int64_t m, int64_t ldx, const Epilogue& e) {
    const int64_t kp = k_padded(SS_W_Q8, w.k);
    const bool amx = m >= amx_q8_min_rows() && amx_q8_usable(w);
    const int64_t rows_held = amx ? (m + 15) / 16 * 16 : m;     // AMX reads whole 16-row tiles
    static thread_local std::vector<uint8_t> rows;
    static thread_local std::vector<float> scales;
    if ((int64_t)rows.size() < rows_held * kp) rows.resize(rows_held * kp);
    if ((int64_t)scales.size() < m) scales.resize(m);
    uint8_t* xq = rows.data();          // (the workers' own thread_locals are other buffers)
    float* row_scales = scales.data();
    parallel_for((m + M_CHUNK - 1) / M_CHUNK, [&](int64_t chunk) {
        for (int64_t r = chunk * M_CHUNK; r < std::min(m, (chunk + 1) * M_CHUNK); r++)
            row_scales[r] = quantize_row(x + r * ldx, w.k, kp, xq + r * kp);
    });
    Epilogue eq = e;
    eq.row_scales = row_scales;
    if (amx) return gemm_amx(w, xq, m, kp, eq);
#ifdef SS_AVX512VNNI
    return gemm_avx512(w, xq, m, kp, eq);
#endif
#ifdef SS_AVX2
    return gemm_avx2(w, xq, m, kp, eq);
#endif
    gemm_q8_portable(w, xq, m, kp, eq);
}

}  // namespace ss
