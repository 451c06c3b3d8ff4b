// bf16 and Q8 matrix multiply on AMX tiles (Intel Sapphire Rapids and later): 16 rows x 4 blocks per
// task. The packed blocks are already the tile layouts AMX reads.
// A 16-row tile costs about what one row costs with vdpbf16ps, which makes verifying a draft
// (several rows per slot) nearly as cheap as decoding one token.
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "gemm_internal.h"
#include "pool.h"

#if defined(SS_AVX512BF16) && defined(__AMX_TILE__) && defined(__AMX_BF16__)
#define SS_AMX 1
#if defined(SS_AVX512VNNI) && defined(__AMX_INT8__)
#define SS_AMX_INT8 1
#endif
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace ss {

#ifdef SS_AMX
namespace {

constexpr int64_t AMX_ROWS = 16;

struct TileConfig {
    uint8_t palette = 1;
    uint8_t start_row = 0;
    uint8_t reserved[14] = {0};
    uint16_t colsb[16] = {0};
    uint8_t rows[16] = {0};
};

std::atomic<uint64_t> g_call{0};
thread_local uint64_t t_configured_call = 0;

// Tile state is per thread and other libraries (oneDNN) may load their own: configure once per call.
inline void configure_tiles(uint64_t call) {
    if (t_configured_call == call) return;
    TileConfig cfg;
    for (int t = 0; t < 8; t++) {
        cfg.rows[t] = AMX_ROWS;
        cfg.colsb[t] = 64;
    }
    _tile_loadconfig(&cfg);
    t_configured_call = call;
}

// tiles 0-3: accumulators of blocks 0..C-1 (float sums for bf16, exact int32 sums for Q8); 4: x rows;
// 5-7: weight blocks. One step consumes 64 bytes of each row: 32 bf16 values (dpbf16ps) or 64 int8
// values (dpbusd: unsigned rows times signed weights, as vpdpbusd does). A weight block's data is the
// tile layout either way ([k/2][16][2] bf16, [k/4][16][4] bytes), 1024 bytes per step.
// STREAM: the weights are read once (one tile of rows): load them with the non-temporal hint, so a
// decode step's pass over every weight evicts less of what the caller's code and data keep in cache.
#define SS_AMX_DP(c, a, b)            \
    if constexpr (Q8)                 \
        _tile_dpbusd(c, a, b);        \
    else                              \
        _tile_dpbf16ps(c, a, b);
#define SS_AMX_LOAD_W(t, p)           \
    if constexpr (STREAM)             \
        _tile_stream_loadd(t, p, 64); \
    else                              \
        _tile_loadd(t, p, 64);

template <int C, bool Q8, bool STREAM>
void amx_tile(const uint8_t* x, int64_t ldx, const uint8_t* w, int64_t bb, int64_t steps, void* acc) {
    _tile_zero(0);
    if (C > 1) _tile_zero(1);
    if (C > 2) _tile_zero(2);
    if (C > 3) _tile_zero(3);
    for (int64_t s = 0; s < steps; s++) {
        const uint8_t* ws = w + s * 1024;
        _tile_loadd(4, x + s * 64, ldx);
        SS_AMX_LOAD_W(5, ws)
        SS_AMX_DP(0, 4, 5)
        if (C > 1) {
            SS_AMX_LOAD_W(6, ws + bb)
            SS_AMX_DP(1, 4, 6)
        }
        if (C > 2) {
            SS_AMX_LOAD_W(7, ws + 2 * bb)
            SS_AMX_DP(2, 4, 7)
        }
        if (C > 3) {
            SS_AMX_LOAD_W(5, ws + 3 * bb)
            SS_AMX_DP(3, 4, 5)
        }
    }
    auto* a = static_cast<uint8_t*>(acc);
    _tile_stored(0, a, NR * NB * 4);
    if (C > 1) _tile_stored(1, a + NB * 4, NR * NB * 4);
    if (C > 2) _tile_stored(2, a + 2 * NB * 4, NR * NB * 4);
    if (C > 3) _tile_stored(3, a + 3 * NB * 4, NR * NB * 4);
}

typedef void (*AmxTileFn)(const uint8_t*, int64_t, const uint8_t*, int64_t, int64_t, void*);
#define SS_AMX_TILES(Q8, STREAM) \
    {amx_tile<1, Q8, STREAM>, amx_tile<2, Q8, STREAM>, amx_tile<3, Q8, STREAM>, amx_tile<4, Q8, STREAM>}
const AmxTileFn kAmxTiles[NR] = SS_AMX_TILES(false, false);
const AmxTileFn kAmxTilesStream[NR] = SS_AMX_TILES(false, true);
#ifdef SS_AMX_INT8
const AmxTileFn kAmxTilesQ8[NR] = SS_AMX_TILES(true, false);
const AmxTileFn kAmxTilesQ8Stream[NR] = SS_AMX_TILES(true, true);
#endif

bool request_amx() {
    const char* env = std::getenv("SPECSERVE_AMX");
    if (env && std::strcmp(env, "0") == 0) return false;
    // Linux hands out the AMX register state only on request (ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)
    return syscall(SYS_arch_prctl, 0x1023, 18) == 0;
}

}  // namespace

bool amx_usable() {
    static const bool ok = request_amx();
    return ok;
}

// x: bf16 rows (BF16 weights) or q + 128 bytes (Q8 weights, e.row_scales), [m rounded up to 16][ldx]
// with ldx = k padded; the rows past m hold anything (their outputs are dropped)
void gemm_amx(const ss_weight& w, const void* x, int64_t m, int64_t ldx, const Epilogue& e) {
    const bool q8 = w.type == SS_W_Q8;
    const int64_t n_blocks = (w.n + NB - 1) / NB, bb = block_bytes(w.type, w.k);
    const int64_t row_bytes = ldx * elem_bytes(w.type), steps = k_padded(w.type, w.k) * elem_bytes(w.type) / 64;
    const int64_t n_tiles = (n_blocks + NR - 1) / NR, m_tiles = (m + AMX_ROWS - 1) / AMX_ROWS;
    const auto* base = static_cast<const uint8_t*>(w.data);
    const auto* xb = static_cast<const uint8_t*>(x);
    const bool stream = m_tiles == 1;
#ifdef SS_AMX_INT8
    const AmxTileFn* tiles = q8 ? (stream ? kAmxTilesQ8Stream : kAmxTilesQ8) : (stream ? kAmxTilesStream : kAmxTiles);
#else
    const AmxTileFn* tiles = stream ? kAmxTilesStream : kAmxTiles;
#endif
    const uint64_t call = g_call.fetch_add(1) + 1;
    parallel_for(n_tiles * m_tiles, [&](int64_t task) {
        configure_tiles(call);
        // a column tile's row tiles one after the other: its weights (tens of KB) are read from memory once
        // and again from cache, where row tile by row tile over all columns read the whole matrix per 16 rows
        // (verifying 4 slots' drafts of 4, 20 rows, cost 30 % more than 16)
        const int64_t tile = task / m_tiles, r0 = (task % m_tiles) * AMX_ROWS;
        const int64_t block0 = tile * NR;
        const int c = (int)std::min<int64_t>(NR, n_blocks - block0);
        alignas(64) float acc[AMX_ROWS * NR * NB];
        const uint8_t* wb = base + block0 * bb + (q8 ? Q8_SUMS_BYTES : 0);
        tiles[c - 1](xb + r0 * row_bytes, row_bytes, wb, bb, steps, acc);
        const int64_t rows = std::min(AMX_ROWS, m - r0);
        if (q8)            // the int32 sums to floats exactly as the vpdpbusd tiles do
            for (int j = 0; j < c; j++)
                for (int64_t r = 0; r < rows; r++) {
                    float* a = acc + r * NR * NB + j * NB;
                    _mm512_storeu_ps(a, q8_sums_to_float(_mm512_loadu_si512(a), base + (block0 + j) * bb,
                                                         e.row_scales[r0 + r]));
                }
        for (int64_t r = 0; r < rows; r++) {
            const float* a = acc + r * NR * NB;
            if (e.mode == SS_OUT_SWIGLU) {
                for (int j = 0; j + 1 < c; j += 2)
                    store_gated(e, r0 + r, block0 + j, scaled(e, _mm512_loadu_ps(a + j * NB), block0 + j),
                                scaled(e, _mm512_loadu_ps(a + (j + 1) * NB), block0 + j + 1));
            } else {
                for (int j = 0; j < c; j++) store_block(e, r0 + r, block0 + j, scaled(e, _mm512_loadu_ps(a + j * NB), block0 + j));
            }
        }
    });
}

bool amx_q8_usable(const ss_weight& w) {
#ifdef SS_AMX_INT8
    return amx_usable() && k_padded(SS_W_Q8, w.k) % 64 == 0;
#else
    (void)w;
    return false;
#endif
}

// Whether AMX tiles and vdpbf16ps give bit-identical results (checked once on random data with
// a wide range of magnitudes); only then may one call use AMX and another the AVX-512 path.
bool amx_matches_avx512() {
    static const bool same = [] {
        std::mt19937 rng(1234);
        const int64_t n = 48, k = 160, m = 16;
        std::vector<uint16_t> weight(n * k), x((m + 15) / 16 * 16 * k_padded(SS_W_BF16, k), 0);
        std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
        std::uniform_int_distribution<int> expo(-12, 12);
        for (auto& v : weight) v = f32_to_bf16(std::ldexp(uni(rng), expo(rng)));
        const int64_t kp = k_padded(SS_W_BF16, k);
        for (int64_t r = 0; r < m; r++)
            for (int64_t i = 0; i < k; i++) x[r * kp + i] = f32_to_bf16(std::ldexp(uni(rng), expo(rng)));
        std::vector<uint8_t> packed(ss_packed_bytes(SS_W_BF16, n, k));
        ss_pack(SS_W_BF16, weight.data(), 1, n, k, packed.data());
        const ss_weight w{packed.data(), nullptr, nullptr, SS_W_BF16, (int32_t)n, (int32_t)k, 0};
        std::vector<float> tiles(m * n), rows(m * n);
        gemm_amx(w, x.data(), m, kp, Epilogue{tiles.data(), n, SS_OUT_STORE, n, nullptr, nullptr, 0});
        for (int64_t r = 0; r < m; r++)
            gemm_avx512(w, x.data() + r * kp, 1, kp, Epilogue{rows.data() + r * n, n, SS_OUT_STORE, n, nullptr, nullptr, 0});
        return std::memcmp(tiles.data(), rows.data(), tiles.size() * sizeof(float)) == 0;
    }();
    return same;
}

#else
bool amx_usable() { return false; }
bool amx_q8_usable(const ss_weight&) { return false; }
void gemm_amx(const ss_weight&, const void*, int64_t, int64_t, const Epilogue&) {}
bool amx_matches_avx512() { return false; }
#endif

}  // namespace ss
