// AVX2 + FMA tiles (CPUs without AVX-512: most AMD EPYC, older Xeons): float32 rows times float32,
// bf16 (widened to float32 in registers, the rows stay float32) or int8 weights (the per-column
// scale applied at the end), and Q8 (int8 rows times int8 weights, summed exactly in int32).
// A packed block's 16 columns are two 8-lane halves. Every accumulator runs over k in order whatever
// the tile shape, so neither the tile nor the other rows change a result (batch invariance).
#include <algorithm>
#include <cstring>

#include "gemm_internal.h"
#include "pool.h"

namespace ss {
#ifdef SS_AVX2
namespace {

constexpr int MR2 = 4;       // rows per tile, at most
constexpr int NR2 = 4;       // blocks per tile, at most
// blocks per tile by rows: 8-12 independent accumulators keep both FMA pipes busy (latency 4); bf16
// tiles keep 8 (tile_bf16); Q8 tiles take at most 3 rows (each row's broadcasts of x take registers
// too, and a spilled accumulator costs more than a smaller tile)
constexpr int kBlocksForRows[MR2 + 1] = {0, 4, 3, 2, 1};
constexpr int kBf16BlocksForRows[MR2 + 1] = {0, 4, 2, 1, 1};
constexpr int kQ8BlocksForRows[MR2 + 1] = {0, 4, 2, 1, 1};

inline __m256 scaled(const Epilogue& e, __m256 v, int64_t col) {
    if (e.scales) v = _mm256_mul_ps(v, _mm256_loadu_ps(e.scales + col));
    if (e.bias) v = _mm256_add_ps(v, _mm256_loadu_ps(e.bias + col));
    return v;
}

// scale, bias, then store / add / gate one row's block (two halves); columns past n are left alone
// (up_lo, up_hi: the next block's accumulators, for a gated product; passed by value, as taking the
// accumulators' address kept them on the stack, stored at every step of k)
inline void finish_block(const Epilogue& e, int64_t row, int64_t block, __m256 lo, __m256 hi, __m256 up_lo,
                         __m256 up_hi) {
    const int64_t col = block * NB;
    if (e.mode == SS_OUT_SWIGLU) {
        float* dst = e.out + row * e.ldo + (block / 2) * NB;
        const __m256 ul = scaled(e, up_lo, col + NB), uh = scaled(e, up_hi, col + NB + 8);
        if (e.act == ACT_SILU) {
            _mm256_storeu_ps(dst, _mm256_mul_ps(silu256(lo), ul));
            _mm256_storeu_ps(dst + 8, _mm256_mul_ps(silu256(hi), uh));
            return;
        }
        alignas(32) float g[NB], u[NB];
        _mm256_store_ps(g, lo), _mm256_store_ps(g + 8, hi), _mm256_store_ps(u, ul), _mm256_store_ps(u + 8, uh);
        for (int l = 0; l < NB; l++) dst[l] = activation(g[l], e.act) * u[l];
        return;
    }
    float* dst = e.out + row * e.ldo + col;
    if (col + NB <= e.n) {
        if (e.mode == SS_OUT_ADD) {
            lo = _mm256_add_ps(_mm256_loadu_ps(dst), lo);
            hi = _mm256_add_ps(_mm256_loadu_ps(dst + 8), hi);
        }
        _mm256_storeu_ps(dst, lo);
        _mm256_storeu_ps(dst + 8, hi);
        return;
    }
    alignas(32) float v[NB];
    _mm256_store_ps(v, lo), _mm256_store_ps(v + 8, hi);
    for (int l = 0; l < NB && col + l < e.n; l++) dst[l] = e.mode == SS_OUT_ADD ? dst[l] + v[l] : v[l];
}

template <int R, int C>
inline __attribute__((always_inline)) void finish_tile(__m256 (&acc)[MR2][NR2][2], const Epilogue& e, int64_t r0,
                                                       int64_t block0) {
    const bool gated = e.mode == SS_OUT_SWIGLU;
#pragma GCC unroll 4
    for (int c = 0; c < C; c += gated ? 2 : 1)
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            const int64_t col = (block0 + c) * NB;
            const __m256 lo = scaled(e, acc[r][c][0], col), hi = scaled(e, acc[r][c][1], col + 8);
            const int up = gated && c + 1 < C ? c + 1 : c;
            finish_block(e, r0 + r, block0 + c, lo, hi, acc[r][up][0], acc[r][up][1]);
        }
}

// 8 columns (half h of block c) at step kk, as float lanes
struct LoadF32 {
    static constexpr int kBytes = 4;
    static __m256 load(const uint8_t* w, int64_t bb, int c, int h, int64_t kk) {
        return _mm256_loadu_ps(reinterpret_cast<const float*>(w + c * bb) + kk * NB + h * 8);
    }
};
struct LoadI8 {       // int8 to float exactly; the per-column scale is applied once, at the end
    static constexpr int kBytes = 1;
    static __m256 load(const uint8_t* w, int64_t bb, int c, int h, int64_t kk) {
        return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(
            reinterpret_cast<const __m128i*>(w + c * bb + kk * NB + h * 8))));
    }
};

#define SS_ZERO_ACC()                                                   \
    __m256 acc[MR2][NR2][2];                                            \
    _Pragma("GCC unroll 4") for (int r = 0; r < R; r++)                 \
    _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) acc[r][c][0] = acc[r][c][1] = _mm256_setzero_ps();

// float32 rows times float32 or int8 weights: one FMA per row, column and k
template <class Load, int R, int C>
void tile_fma(const void* xp, int64_t ldx, const uint8_t* wp, int64_t bb, int64_t k, const Epilogue& e, int64_t r0,
              int64_t block0) {
    const float* x = static_cast<const float*>(xp) + r0 * ldx;
    SS_ZERO_ACC()
    for (int64_t kk = 0; kk < k; kk++) {
        prefetch_next_tile<C, 3>(wp, bb, kk, NB * Load::kBytes);
        __m256 xv[MR2];
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) xv[r] = _mm256_broadcast_ss(x + r * ldx + kk);
#pragma GCC unroll 4
        for (int c = 0; c < C; c++)
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++) {
                const __m256 wv = Load::load(wp, bb, c, h, kk);
#pragma GCC unroll 4
                for (int r = 0; r < R; r++) acc[r][c][h] = _mm256_fmadd_ps(xv[r], wv, acc[r][c][h]);
            }
    }
    finish_tile<R, C>(acc, e, r0, block0);
}

// bf16 weights: the 8 columns of half h of block c at the pair of k from kk, and each pair's even and
// odd k as float lanes
inline __m256i load_pairs(const uint8_t* wp, int64_t bb, int c, int h, int64_t kk) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wp + c * bb + kk * 2 * NB + h * 32));
}
inline __m256 even_k(__m256i pairs) { return _mm256_castsi256_ps(_mm256_slli_epi32(pairs, 16)); }
inline __m256 odd_k(__m256i pairs, __m256i high) { return _mm256_castsi256_ps(_mm256_and_si256(pairs, high)); }

// float32 rows times bf16 weights, stored in pairs of k per column: a 32-bit lane holds (k even, k odd),
// so the even weight is the lane shifted up 16 bits and the odd one the lane's high half. Each output's
// accumulator takes k in order, two FMAs per pair. Every tile keeps 8 accumulators (rows x blocks x 2
// halves), enough to hide the FMA latency: one row takes 4 blocks, 4 rows take 1, so that each widened
// weight feeds 4 rows (the widening and the broadcasts of x cost as many instructions as the FMAs).
template <int R, int C>
void tile_bf16(const void* xp, int64_t ldx, const uint8_t* wp, int64_t bb, int64_t k, const Epilogue& e, int64_t r0,
               int64_t block0) {
    const float* x = static_cast<const float*>(xp) + r0 * ldx;
    const __m256i high = _mm256_set1_epi32((int)0xffff0000u);
    // the loop's sums live apart from acc (which the epilogue reads): sharing the array kept some of
    // them on the stack, stored at every step
    __m256 sum[MR2][NR2][2];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int c = 0; c < C; c++) sum[r][c][0] = sum[r][c][1] = _mm256_setzero_ps();
    int64_t kk = 0;
    for (; kk + 1 < k; kk += 2) {
        prefetch_next_tile<C, 3>(wp, bb, kk / 2, 2 * NB * 2);
        if constexpr (C == 1) {           // widen the block once, then row by row
            __m256 even[2], odd[2];
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++) {
                const __m256i v = load_pairs(wp, bb, 0, h, kk);
                even[h] = even_k(v), odd[h] = odd_k(v, high);
            }
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) {
                const __m256 x0 = _mm256_broadcast_ss(x + r * ldx + kk), x1 = _mm256_broadcast_ss(x + r * ldx + kk + 1);
#pragma GCC unroll 2
                for (int h = 0; h < 2; h++)
                    sum[r][0][h] = _mm256_fmadd_ps(x1, odd[h], _mm256_fmadd_ps(x0, even[h], sum[r][0][h]));
            }
        } else {                          // broadcast the rows once, then block by block
            __m256 x0[MR2], x1[MR2];
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) {
                x0[r] = _mm256_broadcast_ss(x + r * ldx + kk);
                x1[r] = _mm256_broadcast_ss(x + r * ldx + kk + 1);
            }
#pragma GCC unroll 4
            for (int c = 0; c < C; c++)
#pragma GCC unroll 2
                for (int h = 0; h < 2; h++) {
                    const __m256i v = load_pairs(wp, bb, c, h, kk);
                    const __m256 even = even_k(v), odd = odd_k(v, high);
#pragma GCC unroll 4
                    for (int r = 0; r < R; r++)
                        sum[r][c][h] = _mm256_fmadd_ps(x1[r], odd, _mm256_fmadd_ps(x0[r], even, sum[r][c][h]));
                }
        }
    }
    if (kk < k) {                         // odd k: the last pair holds k - 1 and padding
#pragma GCC unroll 4
        for (int c = 0; c < C; c++)
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++) {
                const __m256 even = even_k(load_pairs(wp, bb, c, h, kk));
#pragma GCC unroll 4
                for (int r = 0; r < R; r++)
                    sum[r][c][h] = _mm256_fmadd_ps(_mm256_broadcast_ss(x + r * ldx + kk), even, sum[r][c][h]);
            }
    }
    __m256 acc[MR2][NR2][2];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int c = 0; c < C; c++) acc[r][c][0] = sum[r][c][0], acc[r][c][1] = sum[r][c][1];
    finish_tile<R, C>(acc, e, r0, block0);
}

// Q8: rows stored as q + 128 (k padded to quads), weights as quads of k per column. A signed row byte
// times a weight byte goes through vpmaddubsw as |q| times the weight with q's sign: pairs of
// products stay within int16 (2 x 127 x 127), then vpmaddwd sums the pairs into int32 exactly.
template <int R, int C>
void tile_q8(const void* xp, int64_t ldx, const uint8_t* wp, int64_t bb, int64_t k, const Epilogue& e, int64_t r0,
             int64_t block0) {
    const uint8_t* x = static_cast<const uint8_t*>(xp) + r0 * ldx;
    const int64_t k4 = k_padded(SS_W_Q8, k) / 4;
    const __m256i offset = _mm256_set1_epi8((char)0x80), ones = _mm256_set1_epi16(1);
    __m256i sums[MR2][NR2][2];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int c = 0; c < C; c++) sums[r][c][0] = sums[r][c][1] = _mm256_setzero_si256();
    for (int64_t kk = 0; kk < k4; kk++) {
        prefetch_next_tile<C, 3>(wp, bb, kk, 4 * NB);
        __m256i xs[MR2], xa[MR2];
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            int32_t quad;
            std::memcpy(&quad, x + r * ldx + 4 * kk, 4);
            xs[r] = _mm256_sub_epi8(_mm256_set1_epi32(quad), offset);     // q, signed
            xa[r] = _mm256_abs_epi8(xs[r]);
        }
#pragma GCC unroll 4
        for (int c = 0; c < C; c++)
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++) {
                const __m256i wv = _mm256_loadu_si256(
                    reinterpret_cast<const __m256i*>(wp + c * bb + Q8_SUMS_BYTES + kk * 4 * NB + h * 32));
#pragma GCC unroll 4
                for (int r = 0; r < R; r++) {
                    const __m256i pairs = _mm256_maddubs_epi16(xa[r], _mm256_sign_epi8(wv, xs[r]));
                    sums[r][c][h] = _mm256_add_epi32(sums[r][c][h], _mm256_madd_epi16(pairs, ones));
                }
            }
    }
    SS_ZERO_ACC()
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) {
        const __m256 row_scale = _mm256_set1_ps(e.row_scales[r0 + r]);
#pragma GCC unroll 4
        for (int c = 0; c < C; c++)
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++) acc[r][c][h] = _mm256_mul_ps(_mm256_cvtepi32_ps(sums[r][c][h]), row_scale);
    }
    finish_tile<R, C>(acc, e, r0, block0);
}

template <int R, int C>
constexpr TileFn tile_f32 = tile_fma<LoadF32, R, C>;
template <int R, int C>
constexpr TileFn tile_i8 = tile_fma<LoadI8, R, C>;
const TileFn kTilesF32[MR2][NR2] = SS_TILE_TABLE(tile_f32);
const TileFn kTilesI8[MR2][NR2] = SS_TILE_TABLE(tile_i8);
const TileFn kTilesBF16[MR2][NR2] = SS_TILE_TABLE(tile_bf16);
const TileFn kTilesQ8[MR2][NR2] = SS_TILE_TABLE(tile_q8);

}  // namespace

// x: float32 rows, or for Q8 weights int8 rows stored as q + 128 (e.row_scales)
void gemm_avx2(const ss_weight& w, const void* x, int64_t m, int64_t ldx, const Epilogue& e) {
    const bool bf16 = w.type == SS_W_BF16, q8 = w.type == SS_W_Q8, gated = e.mode == SS_OUT_SWIGLU;
    const TileFn(*tiles)[NR2] = w.type == SS_W_F32 ? kTilesF32 : w.type == SS_W_I8 ? kTilesI8
                              : bf16 ? kTilesBF16 : kTilesQ8;
    // a gated product needs gate and up blocks in one tile: an even number of blocks per tile, and for
    // bf16 at most 2 rows (2 blocks of 4 rows would not fit in the registers)
    const int64_t rows_per_tile = bf16 && gated ? 2 : q8 ? 3 : MR2;
    const int* blocks_for_rows = bf16 ? kBf16BlocksForRows : q8 ? kQ8BlocksForRows : kBlocksForRows;
    int per_tile = blocks_for_rows[std::min<int64_t>(m, rows_per_tile)];
    if (gated && per_tile % 2) per_tile = per_tile == 1 ? 2 : per_tile - 1;
    const int64_t n_blocks = (w.n + NB - 1) / NB, bb = block_bytes(w.type, w.k);
    const auto* base = static_cast<const uint8_t*>(w.data);
    for_each_tile(n_blocks, per_tile, m, rows_per_tile, [&](int64_t r0, int r, int64_t block0, int c) {
        tiles[r - 1][c - 1](x, ldx, base + block0 * bb, bb, w.k, e, r0, block0);
    });
}
#endif
}  // namespace ss
