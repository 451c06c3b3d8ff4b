// bf16 matrix multiply on AMX tiles (Intel Sapphire Rapids and later): 16 rows x 4 blocks per task,
// k in steps of 32. The packed bf16 blocks are already the tile layout AMX reads ([k/2][16][2]).
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

// tiles 0-3: accumulators of blocks 0..C-1; 4: x rows; 5-7: weight blocks
template <int C>
void amx_tile(const uint16_t* x, int64_t ldx, const uint16_t* w, int64_t bs, int64_t kp, float* acc) {
    _tile_zero(0);
    if (C > 1) _tile_zero(1);
    if (C > 2) _tile_zero(2);
    if (C > 3) _tile_zero(3);
    for (int64_t k = 0; k < kp; k += BF16_K_ALIGN) {
        _tile_loadd(4, x + k, ldx * 2);
        _tile_loadd(5, w + k * NB, 64);
        _tile_dpbf16ps(0, 4, 5);
        if (C > 1) {
            _tile_loadd(6, w + bs + k * NB, 64);
            _tile_dpbf16ps(1, 4, 6);
        }
        if (C > 2) {
            _tile_loadd(7, w + 2 * bs + k * NB, 64);
            _tile_dpbf16ps(2, 4, 7);
        }
        if (C > 3) {
            _tile_loadd(5, w + 3 * bs + k * NB, 64);
            _tile_dpbf16ps(3, 4, 5);
        }
    }
    _tile_stored(0, acc, NR * NB * 4);
    if (C > 1) _tile_stored(1, acc + NB, NR * NB * 4);
    if (C > 2) _tile_stored(2, acc + 2 * NB, NR * NB * 4);
    if (C > 3) _tile_stored(3, acc + 3 * NB, NR * NB * 4);
}

typedef void (*AmxTileFn)(const uint16_t*, int64_t, const uint16_t*, int64_t, int64_t, float*);
const AmxTileFn kAmxTiles[NR] = {amx_tile<1>, amx_tile<2>, amx_tile<3>, amx_tile<4>};

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

// x: bf16 rows [m rounded up to 16][ldx], the rows past m zero
void gemm_amx(const ss_weight& w, const uint16_t* x, int64_t m, int64_t ldx, const Epilogue& e) {
    const int64_t n_blocks = (w.n + NB - 1) / NB, bb = block_bytes(w.type, w.k), kp = k_padded(w.type, w.k);
    const int64_t n_tiles = (n_blocks + NR - 1) / NR, m_tiles = (m + AMX_ROWS - 1) / AMX_ROWS;
    const auto* base = static_cast<const uint8_t*>(w.data);
    const uint64_t call = g_call.fetch_add(1) + 1;
    parallel_for(n_tiles * m_tiles, [&](int64_t task) {
        configure_tiles(call);
        const int64_t tile = task % n_tiles, r0 = (task / n_tiles) * AMX_ROWS;
        const int64_t block0 = tile * NR;
        const int c = (int)std::min<int64_t>(NR, n_blocks - block0);
        alignas(64) float acc[AMX_ROWS * NR * NB];
        kAmxTiles[c - 1](x + r0 * ldx, ldx, reinterpret_cast<const uint16_t*>(base + block0 * bb), bb / 2, kp, acc);
        const int64_t rows = std::min(AMX_ROWS, m - r0);
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
void gemm_amx(const ss_weight&, const uint16_t*, int64_t, int64_t, const Epilogue&) {}
bool amx_matches_avx512() { return false; }
#endif

}  // namespace ss
