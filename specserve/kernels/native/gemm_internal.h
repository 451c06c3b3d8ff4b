// What the matrix-multiply files share: the packed layout's constants and the epilogue that turns
// a finished block of 16 accumulated columns into output (scale, bias, store / add / gated product).
#pragma once
#include <algorithm>
#include <cstdint>

#include "kernels.h"
#include "pool.h"
#include "simd.h"

namespace ss {

constexpr int64_t NB = 16;        // columns per packed block
constexpr int NR = 4;             // blocks per tile
constexpr int MR = 4;             // rows per AVX-512 tile
constexpr int64_t M_CHUNK = 64;   // rows per task
constexpr int64_t BF16_K_ALIGN = 32;   // bf16 k is padded to whole AMX tiles (32 values)

constexpr int64_t Q8_K_ALIGN = 4;     // Q8 k is padded to whole quads (one vpdpbusd lane)
constexpr int64_t Q8_SUMS_BYTES = NB * 4;   // a Q8 block starts with its 16 columns' int32 weight sums

inline int64_t k_padded(int type, int64_t k) {
    if (type == SS_W_BF16) return (k + BF16_K_ALIGN - 1) / BF16_K_ALIGN * BF16_K_ALIGN;
    if (type == SS_W_Q8) return (k + Q8_K_ALIGN - 1) / Q8_K_ALIGN * Q8_K_ALIGN;
    return k;
}
inline int64_t elem_bytes(int type) { return type == SS_W_F32 ? 4 : type == SS_W_BF16 ? 2 : 1; }
inline int64_t block_bytes(int type, int64_t k) {
    return NB * k_padded(type, k) * elem_bytes(type) + (type == SS_W_Q8 ? Q8_SUMS_BYTES : 0);
}

struct Epilogue {
    float* out;
    int64_t ldo;
    int mode;
    int64_t n;               // valid columns of the weight
    const float* scales;     // padded to whole blocks
    const float* bias;       // padded to whole blocks
    int act;
    const float* row_scales = nullptr;   // Q8: each row's int8 scale
};

#ifdef SS_AVX512
inline __m512 scaled(const Epilogue& e, __m512 v, int64_t block) {
    if (e.scales) v = _mm512_mul_ps(v, _mm512_loadu_ps(e.scales + block * NB));
    if (e.bias) v = _mm512_add_ps(v, _mm512_loadu_ps(e.bias + block * NB));
    return v;
}

// a Q8 block's int32 sums of one row (rows stored as q + 128) to floats: less 128 x the column sums kept
// at the block's head, times the row's scale; every Q8 kernel (vpdpbusd and AMX tiles) finishes so
inline __m512 q8_sums_to_float(__m512i sums, const uint8_t* block, float row_scale) {
    const __m512i offset = _mm512_slli_epi32(_mm512_loadu_si512(block), 7);
    return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(sums, offset)), _mm512_set1_ps(row_scale));
}

// STORE / ADD of one row's block (columns past n are left alone)
inline void store_block(const Epilogue& e, int64_t row, int64_t block, __m512 v) {
    const int64_t col = block * NB;
    const __mmask16 mask = tail_mask(e.n - col);
    float* dst = e.out + row * e.ldo + col;
    if (e.mode == SS_OUT_ADD) v = _mm512_add_ps(_mm512_maskz_loadu_ps(mask, dst), v);
    _mm512_mask_storeu_ps(dst, mask, v);
}

// SWIGLU: gate block 2j and up block 2j+1 give output columns 16j .. 16j+15
inline void store_gated(const Epilogue& e, int64_t row, int64_t gate_block, __m512 gate, __m512 up) {
    float* dst = e.out + row * e.ldo + (gate_block / 2) * NB;
    if (e.act == ACT_SILU) {
        _mm512_storeu_ps(dst, _mm512_mul_ps(silu512(gate), up));
        return;
    }
    alignas(64) float g[NB], u[NB];
    _mm512_store_ps(g, gate);
    _mm512_store_ps(u, up);
    for (int l = 0; l < NB; l++) dst[l] = activation(g[l], e.act) * u[l];
}
#endif

// The portable kernels' loop: dot(b, r, acc) gives row r's 16 columns of block b (scale and bias
// applied), which are stored, added or, with the next block, gated into the output.
template <class Dot>
void portable_blocks(const ss_weight& w, int64_t m, const Epilogue& e, Dot dot) {
    const int64_t n_blocks = (w.n + NB - 1) / NB;
    const bool gated = e.mode == SS_OUT_SWIGLU;
    parallel_for(gated ? n_blocks / 2 : n_blocks, [&](int64_t task) {
        const int64_t b = gated ? 2 * task : task;
        float acc[NB], up[NB];
        for (int64_t r = 0; r < m; r++) {
            dot(b, r, acc);
            float* dst = e.out + r * e.ldo;
            if (gated) {
                dot(b + 1, r, up);
                for (int l = 0; l < NB; l++) dst[task * NB + l] = activation(acc[l], e.act) * up[l];
                continue;
            }
            for (int l = 0; l < NB && b * NB + l < e.n; l++) {
                if (e.mode == SS_OUT_ADD) dst[b * NB + l] += acc[l];
                else dst[b * NB + l] = acc[l];
            }
        }
    });
}

// A vector kernel's tile: rows r0.. of x times the blocks at w (block stride bb), finished into e.out; the
// kernels keep one for each count of rows and blocks (1-4 each) in a table: tiles[rows - 1][blocks - 1]
typedef void (*TileFn)(const void* x, int64_t ldx, const uint8_t* w, int64_t bb, int64_t k, const Epilogue& e,
                       int64_t r0, int64_t block0);
#define SS_TILE_ROW(T, r) {T<r, 1>, T<r, 2>, T<r, 3>, T<r, 4>}
#define SS_TILE_TABLE(T) {SS_TILE_ROW(T, 1), SS_TILE_ROW(T, 2), SS_TILE_ROW(T, 3), SS_TILE_ROW(T, 4)}

// The vector kernels' loop: threads split the column tiles (per_tile blocks each) and chunks of M_CHUNK
// rows; a task hands its rows to tile(r0, rows, block0, blocks) rows_per_tile at a time.
template <class Tile>
void for_each_tile(int64_t n_blocks, int per_tile, int64_t m, int64_t rows_per_tile, Tile tile) {
    const int64_t n_tiles = (n_blocks + per_tile - 1) / per_tile, m_chunks = (m + M_CHUNK - 1) / M_CHUNK;
    parallel_for(n_tiles * m_chunks, [&](int64_t task) {
        const int64_t block0 = task % n_tiles * per_tile, chunk = task / n_tiles;
        const int blocks = (int)std::min<int64_t>(per_tile, n_blocks - block0);
        const int64_t r_end = std::min(m, (chunk + 1) * M_CHUNK);
        for (int64_t r0 = chunk * M_CHUNK; r0 < r_end; r0 += rows_per_tile)
            tile(r0, (int)std::min<int64_t>(rows_per_tile, r_end - r0), block0, blocks);
    });
}

// A model's weights outgrow L2, and a tile's loads of them stalled its multiplies (AVX2 on a Zen 3: half of
// its samples sat on one load, and a forward of 1-4 rows took 1.6-2.1x as long without this): each step of
// a tile prefetches the next tile's blocks (block0 + C ..., the bytes that follow its own) at the rate it
// reads its own, so they are in cache by the time it starts. The last tile's addresses lie past the weights:
// computed as integers, and a prefetch never faults. Locality: __builtin_prefetch's (3: into L1, the AVX2
// tiles' best on a Zen 3; 2: into L2, the AVX-512 bf16 tiles' best on a Zen 4, 1.1-1.3x for 2-16 rows,
// where into L1 made one row 1.2x slower)
template <int C, int Locality>
inline void prefetch_next_tile(const uint8_t* wp, int64_t bb, int64_t step, int64_t step_bytes) {
    const uintptr_t next = reinterpret_cast<uintptr_t>(wp) + C * bb + step * C * step_bytes;
    for (int64_t at = 0; at < C * step_bytes; at += 64)
        __builtin_prefetch(reinterpret_cast<const char*>(next + at), 0, Locality);
}

// the kernels of each instruction set; x is float32 rows, bf16 rows (k padded) for BF16 weights on
// AVX-512 (float32 rows on AVX2), or
// int8 rows stored as q + 128 (k padded, e.row_scales) for Q8 weights
void gemm_portable(const ss_weight& w, const float* x, int64_t m, int64_t ldx, const Epilogue& e);
void gemm_q8(const ss_weight& w, const float* x, int64_t m, int64_t ldx, const Epilogue& e);
void pack_q8_block(const int8_t* src, int64_t n, int64_t k, int64_t block, uint8_t* dst);
void gemm_avx512(const ss_weight& w, const void* x, int64_t m, int64_t ldx, const Epilogue& e);
void gemm_avx2(const ss_weight& w, const void* x, int64_t m, int64_t ldx, const Epilogue& e);
bool amx_usable();
void gemm_amx(const ss_weight& w, const void* x, int64_t m, int64_t ldx, const Epilogue& e);
bool amx_q8_usable(const ss_weight& w);   // AMX int8 tiles for this Q8 weight (k padded to whole 64-byte steps)
bool amx_matches_avx512();

}  // namespace ss
