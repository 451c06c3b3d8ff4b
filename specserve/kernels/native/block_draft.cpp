// A block drafter's draft (DFlash / DSpark) in one call: context rows, the block through every layer,
// the final norm, the target's lm_head over the draft rows, DSpark's Markov chain and confidence head.
// Between native calls a step streams megabytes of weights through the caches, so each small PyTorch
// operation that used to sit between these pieces ran cold and cost 5-40 µs; together more than the layers.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels.h"
#include "simd.h"

namespace ss {
namespace {

#ifdef SS_AVX512
inline __m512 load_bf16(const uint16_t* p) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
#endif

// bias_g[v] = sum_r feature_g[r] * w2t[r][v] for G rows g at once, over r in order for every v, stored into
// out_g (or added to it with `add`): each 16-wide piece of w2t is read and widened once for all G rows (at 4
// slots the bias read the 512 KB of w2t once per slot and position, 40 % of the draft call), 16 accumulators
// stay in registers (16 / G pieces per row), and every bias gets the same fused multiply-adds in the same
// order for any G, so a slot's logits do not depend on the other slots, nor on whether the bias came from
// the table of every token's bias (ss_markov_table) or was worked out here
template <int G>
void markov_bias(float* const* out, const float* const* feature, const uint16_t* w2t, int64_t rank,
                 int64_t vocab, bool add) {
    constexpr int kVecs = 16 / G;
    int64_t v0 = 0;
#ifdef SS_AVX512
    for (; v0 + kVecs * 16 <= vocab; v0 += kVecs * 16) {
        __m512 acc[G][kVecs];
        for (int g = 0; g < G; g++)
            for (int c = 0; c < kVecs; c++) acc[g][c] = _mm512_setzero_ps();
        for (int64_t r = 0; r < rank; r++) {
            const uint16_t* w = w2t + r * vocab + v0;
            __m512 wv[kVecs];
#pragma GCC unroll 16
            for (int c = 0; c < kVecs; c++) wv[c] = load_bf16(w + c * 16);
#pragma GCC unroll 4
            for (int g = 0; g < G; g++) {
                const __m512 f = _mm512_set1_ps(feature[g][r]);
#pragma GCC unroll 16
                for (int c = 0; c < kVecs; c++) acc[g][c] = _mm512_fmadd_ps(f, wv[c], acc[g][c]);
            }
        }
        for (int g = 0; g < G; g++)
            for (int c = 0; c < kVecs; c++) {
                float* o = out[g] + v0 + c * 16;
                _mm512_storeu_ps(o, add ? _mm512_add_ps(_mm512_loadu_ps(o), acc[g][c]) : acc[g][c]);
            }
    }
#endif
    for (int g = 0; g < G; g++)
        for (int64_t v = v0; v < vocab; v++) {
            float acc = 0.0f;
            for (int64_t r = 0; r < rank; r++) acc = std::fma(feature[g][r], bf16_to_f32(w2t[r * vocab + v]), acc);
            out[g][v] = add ? out[g][v] + acc : acc;
        }
}

// the Markov bias of n rows, in groups of 4, 2 and 1
void markov_bias_rows(float* const* out, const float* const* feature, int64_t n, const uint16_t* w2t,
                      int64_t rank, int64_t vocab, bool add) {
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) markov_bias<4>(out + i, feature + i, w2t, rank, vocab, add);
    for (; i + 2 <= n; i += 2) markov_bias<2>(out + i, feature + i, w2t, rank, vocab, add);
    for (; i < n; i++) markov_bias<1>(out + i, feature + i, w2t, rank, vocab, add);
}

// sigmoid(w . row + per_token[prev] + bias): the confidence head's prediction for one draft row
float confidence(const ss_block_draft& d, const float* row, int64_t hidden, int64_t prev) {
    float z = d.conf_bias + (d.conf_per_token ? d.conf_per_token[prev] : 0.0f);
    for (int64_t i = 0; i < hidden; i++) z += d.conf_w[i] * row[i];
    return 1.0f / (1.0f + std::exp(-z));
}

// the drafts of every slot, position by position (draft k-1 conditions position k's Markov bias: a row of
// the table when there is one, else worked out for all slots at once); rows [n_slots * n_draft, hidden] are
// the draft rows the logits came from
void pick_drafts(const ss_block_draft& d, int64_t vocab, const float* rows, int64_t hidden) {
    const int64_t row = d.n_draft * vocab, n_slots = d.n_slots;
    static thread_local std::vector<int64_t> prev;
    static thread_local std::vector<float*> slot_logits;
    static thread_local std::vector<const float*> features;
    prev.assign(d.anchors, d.anchors + n_slots);
    slot_logits.resize(n_slots);
    features.resize(n_slots);
    for (int64_t k = 0; k < d.n_draft; k++) {
        for (int64_t s = 0; s < n_slots; s++) {
            if (d.confidence)
                d.confidence[s * d.n_draft + k] = confidence(d, rows + (s * d.n_draft + k) * hidden, hidden, prev[s]);
            slot_logits[s] = d.logits + s * row + k * vocab;
            features[s] = d.w1 ? d.w1 + prev[s] * d.rank : nullptr;
        }
        if (d.markov_table) {
            for (int64_t s = 0; s < n_slots; s++) {
                const float* bias = d.markov_table + prev[s] * vocab;
                for (int64_t v = 0; v < vocab; v++) slot_logits[s][v] += bias[v];
            }
        } else if (d.w2t) {
            markov_bias_rows(slot_logits.data(), features.data(), n_slots, d.w2t, d.rank, vocab, true);
        }
        for (int64_t s = 0; s < n_slots; s++) {
            float* lk = slot_logits[s];
            int64_t pick;
            if (d.uniforms && d.temperature && d.temperature[s] > 0.0f) {
                const int64_t at = s * d.n_draft + k;
                pick = draw_draft(lk, vocab, d.top_k[s], d.top_p[s], d.min_p[s], d.temperature[s], d.uniforms[at],
                                  d.id_map, d.q + at * d.q_vocab, d.q_vocab);
            } else {
                pick = argmax(lk, vocab);
            }
            prev[s] = d.id_map ? d.id_map[pick] : pick;
            d.tokens[s * d.n_draft + k] = prev[s];
        }
    }
}

template <typename T>
T* grow(std::vector<T>& buf, int64_t n) {
    if ((int64_t)buf.size() < n) buf.resize(n);
    return buf.data();
}

// the rows' slots, positions, visible keys and RoPE rows (kernels.h), when the caller left them out
ss_attn derive_rows(const ss_block_draft& d, std::vector<int64_t>& buf) {
    const int64_t n = d.n_ctx + d.n_slots * d.n_block;
    int64_t* slot = grow(buf, 3 * n);
    int64_t *pos = slot + n, *key_len = pos + n;
    for (int64_t r = 0; r < d.n_ctx; r++) {
        slot[r] = d.ctx_slot[r];
        pos[r] = d.ctx_pos[r];
        key_len[r] = 0;                       // a context row only writes its key and value
    }
    for (int64_t s = 0; s < d.n_slots; s++)
        for (int64_t i = 0; i < d.n_block; i++) {
            const int64_t r = d.n_ctx + s * d.n_block + i;
            slot[r] = d.slot[s];
            pos[r] = d.pos0[s] + i;
            key_len[r] = d.pos0[s] + d.n_block;   // every block row sees the whole block
        }
    ss_attn a = d.attn;
    a.row_slot = slot;
    a.row_pos = a.rope_index = pos;
    a.key_len = key_len;
    return a;
}

// the context features [n_ctx, fc.k] gathered from their per-layer parts
const float* gather_context(const ss_block_draft& d, std::vector<float>& buf) {
    const int64_t k = d.fc.k, width = k / d.n_parts;
    float* out = grow(buf, d.n_ctx * k);
    int64_t row = 0;
    for (int64_t c = 0; c < d.n_chunks; c++) {
        for (int64_t p = 0; p < d.n_parts; p++) {
            const float* part = d.ctx_parts[c * d.n_parts + p];
            for (int64_t r = 0; r < d.ctx_chunk_rows[c]; r++)
                std::memcpy(out + (row + r) * k + p * width, part + r * width, width * sizeof(float));
        }
        row += d.ctx_chunk_rows[c];
    }
    return out;
}

}  // namespace
}  // namespace ss

extern "C" void ss_markov_table(const float* w1, const uint16_t* w2t, int64_t rank, int64_t vocab, float* table) {
    using namespace ss;
    constexpr int64_t kRows = 64;
    const float* feature[kRows];
    float* out[kRows];
    for (int64_t t0 = 0; t0 < vocab; t0 += kRows) {
        const int64_t n = std::min(kRows, vocab - t0);
        for (int64_t i = 0; i < n; i++) {
            feature[i] = w1 + (t0 + i) * rank;
            out[i] = table + (t0 + i) * vocab;
        }
        markov_bias_rows(out, feature, n, w2t, rank, vocab, false);
    }
}

extern "C" int32_t ss_block_draft_forward(const ss_model* m, const ss_block_draft* d) {
    using namespace ss;
    static thread_local std::vector<float> feats_buf, ctx_buf, x_buf, rows_buf;
    static thread_local std::vector<int64_t> index_buf;
    const int64_t hidden = m->hidden, n = d->n_slots * d->n_block;
    const ss_attn attn = d->attn.row_slot ? d->attn : derive_rows(*d, index_buf);
    float* ctx = nullptr;
    if (d->n_ctx > 0) {         // ctx = hidden_norm(fc(taps)), no input norm (the rows only give keys/values)
        const float* feats = d->n_chunks == 1 && d->n_parts == 1 ? d->ctx_parts[0] : gather_context(*d, feats_buf);
        ctx = grow(ctx_buf, d->n_ctx * hidden);
        gemm(d->fc, feats, d->n_ctx, d->fc.k, ctx, hidden, SS_OUT_STORE);
        rms_norm_rows(ctx, hidden, d->hidden_norm, ctx, hidden, d->n_ctx, hidden, m->eps);
    }
    float* x = grow(x_buf, n * hidden);
    embed_rows(*m, d->block_tokens, n, x);
    for (int32_t l = 0; l < m->n_layers; l++) layer_forward(*m, l, x, n, nullptr, d->n_ctx, ctx, attn);
    rms_norm_rows(x, hidden, m->final_norm, d->hidden_out, hidden, n, hidden, m->eps);
    if (!d->logits) return 0;
    float* rows = grow(rows_buf, d->n_slots * d->n_draft * hidden);
    for (int64_t s = 0; s < d->n_slots; s++)
        std::memcpy(rows + s * d->n_draft * hidden, d->hidden_out + (s * d->n_block + d->first_draft_row) * hidden,
                    d->n_draft * hidden * sizeof(float));
    gemm(m->head, rows, d->n_slots * d->n_draft, hidden, d->logits, m->vocab, SS_OUT_STORE);
    pick_drafts(*d, m->vocab, rows, hidden);
    return 0;
}
