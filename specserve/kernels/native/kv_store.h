// Element types of the KV cache: float32 (default), float16 and bfloat16 (--cache-type-k/-v).
// Each type converts one element to and from float, and 16 (AVX-512) or 8 (AVX2) at a time to a vector
// of floats.
#pragma once
#include <cstdint>
#include <cstring>

#include "simd.h"

namespace ss {

enum KvType { KV_F32 = 0, KV_F16 = 1, KV_BF16 = 2 };

inline int64_t kv_bytes(int type) { return type == KV_F32 ? 4 : 2; }

// IEEE half <-> float, round to nearest even (subnormals kept), for the scalar paths
inline float f16_to_f32(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
    uint32_t bits;
    if (exp == 0) {
        if (mant == 0) {
            bits = sign;
        } else {                                   // subnormal: renormalize
            int e = -1;
            uint32_t m = mant;
            do { e++; m <<= 1; } while ((m & 0x400u) == 0);
            bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((m & 0x3ffu) << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (mant << 13);
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
    }
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

inline uint16_t f32_to_f16(float f) {
#ifdef SS_AVX512
    return (uint16_t)_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
#else
    uint32_t x;
    std::memcpy(&x, &f, 4);
    const uint32_t sign = (x >> 16) & 0x8000u;
    const int32_t exp = (int32_t)((x >> 23) & 0xffu) - 127 + 15;
    uint32_t mant = x & 0x7fffffu;
    if (((x >> 23) & 0xffu) == 0xffu) return (uint16_t)(sign | 0x7c00u | (mant ? 0x200u : 0u));
    if (exp >= 31) return (uint16_t)(sign | 0x7c00u);
    if (exp <= 0) {                                // subnormal half or zero
        if (exp < -10) return (uint16_t)sign;
        mant |= 0x800000u;
        const uint32_t shift = (uint32_t)(14 - exp);
        uint32_t half = mant >> shift;
        const uint32_t rest = mant & ((1u << shift) - 1), mid = 1u << (shift - 1);
        if (rest > mid || (rest == mid && (half & 1u))) half++;
        return (uint16_t)(sign | half);
    }
    uint32_t half = sign | ((uint32_t)exp << 10) | (mant >> 13);
    const uint32_t rest = mant & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) half++;
    return (uint16_t)half;
#endif
}

template <int T> struct Kv;

template <> struct Kv<KV_F32> {
    typedef float elem;
    static float get(const float* p) { return *p; }
    static void put(float* p, float v) { *p = v; }
#ifdef SS_AVX512
    static __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
    static __m512 load(__mmask16 m, const float* p) { return _mm512_maskz_loadu_ps(m, p); }
#endif
#ifdef SS_AVX2
    static __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
#endif
};

template <> struct Kv<KV_F16> {
    typedef uint16_t elem;
    static float get(const uint16_t* p) { return f16_to_f32(*p); }
    static void put(uint16_t* p, float v) { *p = f32_to_f16(v); }
#ifdef SS_AVX512
    static __m512 load16(const uint16_t* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
    static __m512 load(__mmask16 m, const uint16_t* p) { return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p)); }
#endif
#ifdef SS_AVX2
    static __m256 load8(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
#endif
};

template <> struct Kv<KV_BF16> {
    typedef uint16_t elem;
    static float get(const uint16_t* p) { return bf16_to_f32(*p); }
    static void put(uint16_t* p, float v) { *p = f32_to_bf16(v); }
#ifdef SS_AVX512
    static __m512 widen(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }
    static __m512 load16(const uint16_t* p) { return widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
    static __m512 load(__mmask16 m, const uint16_t* p) { return widen(_mm256_maskz_loadu_epi16(m, p)); }
#endif
#ifdef SS_AVX2
    static __m256 load8(const uint16_t* p) {
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
    }
#endif
};

}  // namespace ss
