// AVX-512 tiles of up to MR rows x NR blocks: float32, int8 (converted to float32 in registers, the
// per-column scale applied at the end) and bf16 pairs (vdpbf16ps). Every accumulator runs over k in
// order, so the tile shape never changes a result.
#include <algorithm>
#include <cstring>

#include "gemm_internal.h"
#include "pool.h"

namespace ss {
#ifdef SS_AVX512
namespace {

template <int R, int C>
inline __attribute__((always_inline)) void finish_tile(__m512 (&acc)[MR][NR], const Epilogue& e, int64_t r0,
                                                       int64_t block0) {
#pragma GCC unroll 4
    for (int c = 0; c < C; c++)
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) acc[r][c] = scaled(e, acc[r][c], block0 + c);
    if (e.mode == SS_OUT_SWIGLU) {
#pragma GCC unroll 2
        for (int c = 0; c + 1 < C; c += 2)
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) store_gated(e, r0 + r, block0 + c, acc[r][c], acc[r][c + 1]);
        return;
    }
#pragma GCC unroll 4
    for (int c = 0; c < C; c++)
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) store_block(e, r0 + r, block0 + c, acc[r][c]);
}

#define SS_ZERO_ACC()                        \
    __m512 acc[MR][NR];                      \
    _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) \
    _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) acc[r][c] = _mm512_setzero_ps();

// 16 columns of weight block c at step kk, as float lanes
struct LoadF32 {
    static constexpr int kBytes = 4;
    static __m512 load(const uint8_t* w, int64_t bb, int c, int64_t kk) {
        return _mm512_loadu_ps(reinterpret_cast<const float*>(w + c * bb) + kk * NB);
    }
};
struct LoadI8 {       // int8 to float exactly; the per-column scale is applied once, by the epilogue
    static constexpr int kBytes = 1;
    static __m512 load(const uint8_t* w, int64_t bb, int c, int64_t kk) {
        return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(
            reinterpret_cast<const __m128i*>(w + c * bb + kk * NB))));
    }
};

// float32 rows times float32 or int8 weights: one FMA per row, column block and k
template <class Load, int R, int C>
void tile_fma(const void* xp, int64_t ldx, const uint8_t* wp, int64_t bb, int64_t k, const Epilogue& e, int64_t r0,
              int64_t block0) {
    const float* x = static_cast<const float*>(xp) + r0 * ldx;
    SS_ZERO_ACC()
    for (int64_t kk = 0; kk < k; kk++) {
        prefetch_next_tile<C, 2>(wp, bb, kk, NB * Load::kBytes);
        __m512 wv[NR];
#pragma GCC unroll 4
        for (int c = 0; c < C; c++) wv[c] = Load::load(wp, bb, c, kk);
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            const __m512 xv = _mm512_set1_ps(x[r * ldx + kk]);
#pragma GCC unroll 4
            for (int c = 0; c < C; c++) acc[r][c] = _mm512_fmadd_ps(xv, wv[c], acc[r][c]);
        }
    }
    finish_tile<R, C>(acc, e, r0, block0);
}

#ifdef SS_AVX512BF16
// x: bf16 rows with k padded; one step consumes a pair of k
template <int R, int C>
void tile_bf16(const void* xp, int64_t ldx, const uint8_t* wp, int64_t bb, int64_t k, const Epilogue& e, int64_t r0,
               int64_t block0) {
    const uint16_t* x = static_cast<const uint16_t*>(xp) + r0 * ldx;
    const uint16_t* w = reinterpret_cast<const uint16_t*>(wp);
    const int64_t bs = bb / 2, k2 = k_padded(SS_W_BF16, k) / 2;
    SS_ZERO_ACC()
    for (int64_t kk = 0; kk < k2; kk++) {
        prefetch_next_tile<C, 2>(wp, bb, kk, 2 * NB * 2);
        __m512bh wv[NR];
#pragma GCC unroll 4
        for (int c = 0; c < C; c++) wv[c] = (__m512bh)_mm512_loadu_si512(w + c * bs + kk * 2 * NB);
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            int32_t pair;
            std::memcpy(&pair, x + r * ldx + 2 * kk, 4);
            const __m512bh xv = (__m512bh)_mm512_set1_epi32(pair);
#pragma GCC unroll 4
            for (int c = 0; c < C; c++) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], xv, wv[c]);
        }
    }
    finish_tile<R, C>(acc, e, r0, block0);
}
#endif

#ifdef SS_AVX512VNNI
// x: int8 rows stored as q + 128 (k padded to quads); one step consumes a quad of k (gemm_q8.cpp). One row
// does not prefetch: the hardware's keeps up with half the bytes of bf16, and the prefetches made it 8 %
// slower; more rows do (a draft call's weights are cold, evicted by the target's forward: DSpark, DFlash
// 1-4 % faster end to end on a Zen 4)
template <int R, int C>
void tile_q8(const void* xp, int64_t ldx, const uint8_t* wp, int64_t bb, int64_t k, const Epilogue& e, int64_t r0,
             int64_t block0) {
    const uint8_t* x = static_cast<const uint8_t*>(xp) + r0 * ldx;
    const int64_t k4 = k_padded(SS_W_Q8, k) / 4;
    __m512i sums[R][C];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int c = 0; c < C; c++) sums[r][c] = _mm512_setzero_si512();
    for (int64_t kk = 0; kk < k4; kk++) {
        if constexpr (R > 1) prefetch_next_tile<C, 2>(wp, bb, kk, 4 * NB);
        __m512i wv[C];
#pragma GCC unroll 4
        for (int c = 0; c < C; c++) wv[c] = _mm512_loadu_si512(wp + c * bb + Q8_SUMS_BYTES + kk * 4 * NB);
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            int32_t quad;
            std::memcpy(&quad, x + r * ldx + 4 * kk, 4);
            const __m512i xv = _mm512_set1_epi32(quad);
#pragma GCC unroll 4
            for (int c = 0; c < C; c++) sums[r][c] = _mm512_dpbusd_epi32(sums[r][c], xv, wv[c]);
        }
    }
    SS_ZERO_ACC()
#pragma GCC unroll 4
    for (int c = 0; c < C; c++)
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) acc[r][c] = q8_sums_to_float(sums[r][c], wp + c * bb, e.row_scales[r0 + r]);
    finish_tile<R, C>(acc, e, r0, block0);
}
#endif

template <int R, int C>
constexpr TileFn tile_f32 = tile_fma<LoadF32, R, C>;
template <int R, int C>
constexpr TileFn tile_i8 = tile_fma<LoadI8, R, C>;
const TileFn kTilesF32[MR][NR] = SS_TILE_TABLE(tile_f32);
const TileFn kTilesI8[MR][NR] = SS_TILE_TABLE(tile_i8);
#ifdef SS_AVX512BF16
const TileFn kTilesBF16[MR][NR] = SS_TILE_TABLE(tile_bf16);
#endif
#ifdef SS_AVX512VNNI
const TileFn kTilesQ8[MR][NR] = SS_TILE_TABLE(tile_q8);
#endif

}  // namespace

void gemm_avx512(const ss_weight& w, const void* x, int64_t m, int64_t ldx, const Epilogue& e) {
    const TileFn(*tiles)[NR] = w.type == SS_W_F32 ? kTilesF32 : kTilesI8;
#ifdef SS_AVX512BF16
    if (w.type == SS_W_BF16) tiles = kTilesBF16;
#endif
#ifdef SS_AVX512VNNI
    if (w.type == SS_W_Q8) tiles = kTilesQ8;
#endif
    const int64_t n_blocks = (w.n + NB - 1) / NB, bb = block_bytes(w.type, w.k);
    const auto* base = static_cast<const uint8_t*>(w.data);
    for_each_tile(n_blocks, NR, m, MR, [&](int64_t r0, int r, int64_t block0, int c) {
        tiles[r - 1][c - 1](x, ldx, base + block0 * bb, bb, w.k, e, r0, block0);
    });
}
#endif
}  // namespace ss
