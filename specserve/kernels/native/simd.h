// Scalar, AVX-512 and AVX2 helpers shared by the kernels: bf16 conversion, a vector exp, activations.
// Every kernel computes each output element with a fixed sequence of operations, so a row's
// result never depends on how many other rows are in the call (batch invariance).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512DQ__)
#include <immintrin.h>
#define SS_AVX512 1
#if defined(__AVX512BF16__)
#define SS_AVX512BF16 1
#endif
#if defined(__AVX512VNNI__)
#define SS_AVX512VNNI 1
#endif
#elif defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define SS_AVX2 1      // AVX2 + FMA without AVX-512 (x86-64-v3: most AMD EPYC and older Xeons)
#endif

namespace ss {

inline float bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

// Round to nearest even with subnormals flushed to zero: the same result as the AVX-512 BF16
// conversion instructions, so scalar tails and vector bodies agree.
inline uint16_t f32_to_bf16(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7f800000u) == 0) return (uint16_t)((u >> 16) & 0x8000u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

enum Activation { ACT_SILU = 0, ACT_GELU = 1, ACT_GELU_TANH = 2, ACT_RELU = 3 };

inline float activation(float x, int act) {
    switch (act) {
        case ACT_GELU: return 0.5f * x * (1.0f + std::erf(x * 0.70710678118654752f));
        case ACT_GELU_TANH: {
            const float inner = 0.7978845608028654f * (x + 0.044715f * x * x * x);
            return 0.5f * x * (1.0f + std::tanh(inner));
        }
        case ACT_RELU: return x > 0.0f ? x : 0.0f;
        default: return x / (1.0f + std::exp(-x));
    }
}

#ifdef SS_AVX512
// e^x for x <= 88.7, via 2^n * p(r) with a degree-6 Taylor polynomial on |r| <= ln2/2
// (relative error ~2e-7); very negative inputs underflow to 0 through scalef.
inline __m512 exp512(__m512 x) {
    x = _mm512_max_ps(x, _mm512_set1_ps(-104.0f));
    x = _mm512_min_ps(x, _mm512_set1_ps(88.7f));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.4426950408889634f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187e-06f), r);
    __m512 p = _mm512_set1_ps(1.0f / 720.0f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

inline __m512 silu512(__m512 x) {
    const __m512 e = exp512(_mm512_sub_ps(_mm512_setzero_ps(), x));
    return _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}

inline __mmask16 tail_mask(int64_t n) { return n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1u); }
#endif

#ifdef SS_AVX2
// e^x as exp512 computes it, for x clamped to [-87, 87] so that 2^n is a normal float built from its
// exponent bits (silu only needs the far tails to be 0 or huge)
inline __m256 exp256(__m256 x) {
    x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
    x = _mm256_min_ps(x, _mm256_set1_ps(87.0f));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.4426950408889634f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.428606765330187e-06f), r);
    __m256 p = _mm256_set1_ps(1.0f / 720.0f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
}

inline __m256 silu256(__m256 x) {
    const __m256 e = exp256(_mm256_sub_ps(_mm256_setzero_ps(), x));
    return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

// the 8 lanes' maximum, and their sum in a fixed order (pairs, then pairs of pairs)
inline float reduce_max8(__m256 v) {
    alignas(32) float l[8];
    _mm256_store_ps(l, v);
    return std::max(std::max(std::max(l[0], l[1]), std::max(l[2], l[3])),
                    std::max(std::max(l[4], l[5]), std::max(l[6], l[7])));
}
inline float reduce_sum8(__m256 v) {
    alignas(32) float l[8];
    _mm256_store_ps(l, v);
    return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
}
#endif

// max of x[0..n) (-inf for n = 0): a maximum is exact in any order, so the vector one gives the same
// value; the scalar loop is a chain of dependent compares (a sixth of a 16-row forward in attention)
inline float row_max(const float* x, int64_t n) {
#ifdef SS_AVX512
    __m512 vmax = _mm512_set1_ps(-INFINITY);
    for (int64_t j = 0; j < n; j += 16) vmax = _mm512_max_ps(vmax, _mm512_mask_loadu_ps(vmax, tail_mask(n - j), x + j));
    return _mm512_reduce_max_ps(vmax);
#elif defined(SS_AVX2)
    __m256 vmax = _mm256_set1_ps(-INFINITY);
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(x + j));
    float mx = reduce_max8(vmax);
    for (; j < n; j++) mx = std::max(mx, x[j]);
    return mx;
#else
    float mx = -INFINITY;
    for (int64_t j = 0; j < n; j++) mx = std::max(mx, x[j]);
    return mx;
#endif
}

// out[i] = float(bf16(x[i])) pairs packed for the bf16 dot products: x rows converted once per call.
inline void to_bf16_row(const float* x, uint16_t* out, int64_t n, int64_t n_padded) {
    int64_t i = 0;
#ifdef SS_AVX512BF16
    for (; i + 32 <= n; i += 32) {
        const __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + i + 16), _mm512_loadu_ps(x + i));
        _mm512_storeu_si512(out + i, (__m512i)v);
    }
#endif
    for (; i < n; i++) out[i] = f32_to_bf16(x[i]);
    for (; i < n_padded; i++) out[i] = 0;
}

}  // namespace ss
