// Packed-weight matrix multiply y = x W^T (+ bias): packing, the portable kernel and the choice of
// kernel per call. Three epilogues: store, add into the output (residual connections) and a gated
// activation act(gate) * up (the MLP).
//
// Each output element is one accumulator that runs over k in order, whatever the number of rows or
// threads: kernels differ only in how many rows and columns they hold at once, and threads split
// columns and row chunks, never k. So a row's result is bit-identical in every batch.
#include <algorithm>
#include <vector>

#include "gemm_internal.h"
#include "pool.h"

namespace ss {
namespace {

// rows from this many up use AMX when it gives the same bits as vdpbf16ps (below, AVX-512 is faster)
constexpr int64_t kAmxMinRows = 4;

float weight_at(int type, const uint8_t* block, int64_t kk, int lane) {
    if (type == SS_W_F32) return reinterpret_cast<const float*>(block)[kk * NB + lane];
    if (type == SS_W_BF16)
        return bf16_to_f32(reinterpret_cast<const uint16_t*>(block)[((kk / 2) * NB + lane) * 2 + (kk & 1)]);
    return (float)reinterpret_cast<const int8_t*>(block)[kk * NB + lane];
}

// one row's block of 16 columns, accumulated over k in order
void dot_block(const ss_weight& w, const uint8_t* block, const float* x, const Epilogue& e, int64_t b, float* acc) {
    const bool bf16 = w.type == SS_W_BF16;
    for (int l = 0; l < NB; l++) acc[l] = 0.0f;
    for (int64_t kk = 0; kk < w.k; kk++) {
        const float xv = bf16 ? bf16_to_f32(f32_to_bf16(x[kk])) : x[kk];
        for (int l = 0; l < NB; l++) acc[l] += xv * weight_at(w.type, block, kk, l);
    }
    for (int l = 0; l < NB; l++) {
        if (e.scales) acc[l] *= e.scales[b * NB + l];
        if (e.bias) acc[l] += e.bias[b * NB + l];
    }
}

}  // namespace

void gemm_portable(const ss_weight& w, const float* x, int64_t m, int64_t ldx, const Epilogue& e) {
    const int64_t bb = block_bytes(w.type, w.k);
    const auto* base = static_cast<const uint8_t*>(w.data);
    portable_blocks(w, m, e, [&](int64_t b, int64_t r, float* acc) { dot_block(w, base + b * bb, x + r * ldx, e, b, acc); });
}

void gemm(const ss_weight& w, const float* x, int64_t m, int64_t ldx, float* out, int64_t ldo, int mode) {
    if (m <= 0) return;
    const Epilogue e{out, ldo, mode, w.n, w.scales, w.bias, w.act};
    if (w.type == SS_W_Q8) return gemm_q8(w, x, m, ldx, e);
#ifdef SS_AVX512
    if (w.type != SS_W_BF16) return gemm_avx512(w, x, m, ldx, e);
#ifdef SS_AVX512BF16
    // rows rounded to bf16 once; AMX reads whole 16-row tiles: the rows past m hold whatever was
    // there (each output row depends on its own input row only, and those outputs are dropped)
    const bool amx = amx_usable() && (m >= kAmxMinRows || !amx_matches_avx512());
    const int64_t kp = k_padded(w.type, w.k), rows = amx ? (m + 15) / 16 * 16 : m;
    static thread_local std::vector<uint16_t> buffer;
    if ((int64_t)buffer.size() < rows * kp) buffer.resize(rows * kp);
    uint16_t* xb = buffer.data();
    parallel_for((m + M_CHUNK - 1) / M_CHUNK, [&](int64_t chunk) {
        for (int64_t r = chunk * M_CHUNK; r < std::min(m, (chunk + 1) * M_CHUNK); r++)
            to_bf16_row(x + r * ldx, xb + r * kp, w.k, kp);
    });
    if (amx) return gemm_amx(w, xb, m, kp, e);
    return gemm_avx512(w, xb, m, kp, e);
#endif
#endif
#ifdef SS_AVX2
    return gemm_avx2(w, x, m, ldx, e);
#endif
    gemm_portable(w, x, m, ldx, e);
}

}  // namespace ss

extern "C" {

int64_t ss_packed_bytes(int32_t type, int64_t n, int64_t k) {
    return ((n + ss::NB - 1) / ss::NB) * ss::block_bytes(type, k);
}

void ss_pack(int32_t type, const void* src, int32_t src_bf16, int64_t n, int64_t k, void* dst) {
    using namespace ss;
    const int64_t n_blocks = (n + NB - 1) / NB, kp = k_padded(type, k), bb = block_bytes(type, k);
    parallel_for(n_blocks, [&](int64_t b) {
        uint8_t* block = static_cast<uint8_t*>(dst) + b * bb;
        if (type == SS_W_Q8) return pack_q8_block(static_cast<const int8_t*>(src), n, k, b, block);
        for (int64_t kk = 0; kk < kp; kk++) {
            for (int l = 0; l < NB; l++) {
                const int64_t row = b * NB + l;
                const bool inside = row < n && kk < k;
                const int64_t at = row * k + kk;
                if (type == SS_W_I8) {
                    reinterpret_cast<int8_t*>(block)[kk * NB + l] = inside ? static_cast<const int8_t*>(src)[at] : 0;
                    continue;
                }
                const float value = !inside ? 0.0f
                    : src_bf16 ? bf16_to_f32(static_cast<const uint16_t*>(src)[at]) : static_cast<const float*>(src)[at];
                if (type == SS_W_F32) {
                    reinterpret_cast<float*>(block)[kk * NB + l] = value;
                } else {      // exact for a bf16 source; rounded to nearest even from float32
                    const uint16_t bits = (src_bf16 && inside) ? static_cast<const uint16_t*>(src)[at] : f32_to_bf16(value);
                    reinterpret_cast<uint16_t*>(block)[((kk / 2) * NB + l) * 2 + (kk & 1)] = bits;
                }
            }
        }
    });
}

void ss_linear(const ss_weight* w, const float* x, int64_t m, int64_t ldx, float* out, int64_t ldo, int32_t mode) {
    ss::gemm(*w, x, m, ldx, out, ldo, mode);
}

}  // extern "C"
