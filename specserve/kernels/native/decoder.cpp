// The decoder forward of the Llama / Qwen2 / Qwen3 families over a flat batch of rows, one C call
// per step: embedding, layers (norm, q/k/v, attention over the cache, o, norm, gated MLP), taps,
// final norm and the lm_head for the rows that need logits. The residual stream is float32.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels.h"
#include "pool.h"
#include "simd.h"

namespace ss {

void rms_norm_rows(const float* x, int64_t ldx, const float* weight, float* out, int64_t ldo, int64_t m,
                   int64_t dim, float eps) {
    parallel_for((m + 15) / 16, [&](int64_t chunk) {
        for (int64_t r = chunk * 16; r < std::min(m, chunk * 16 + 16); r++) {
            const float* xr = x + r * ldx;
            float* o = out + r * ldo;
            float ss = 0.0f;
#ifdef SS_AVX512
            __m512 acc = _mm512_setzero_ps();
            for (int64_t i = 0; i < dim; i += 16) {
                const __m512 v = _mm512_maskz_loadu_ps(tail_mask(dim - i), xr + i);
                acc = _mm512_fmadd_ps(v, v, acc);
            }
            ss = _mm512_reduce_add_ps(acc);
#else
            for (int64_t i = 0; i < dim; i++) ss += xr[i] * xr[i];
#endif
            const float inv = 1.0f / std::sqrt(ss / (float)dim + eps);
            if (weight) {
                for (int64_t i = 0; i < dim; i++) o[i] = xr[i] * inv * weight[i];
            } else {
                for (int64_t i = 0; i < dim; i++) o[i] = xr[i] * inv;
            }
        }
    });
}

// index of the first maximum (as torch.argmax), NaN-free input assumed
int64_t argmax(const float* x, int64_t n) {
    float best = -INFINITY;
    int64_t i = 0;
#ifdef SS_AVX512
    __m512 vmax = _mm512_set1_ps(-INFINITY);
    for (; i + 16 <= n; i += 16) vmax = _mm512_max_ps(vmax, _mm512_loadu_ps(x + i));
    best = _mm512_reduce_max_ps(vmax);
#endif
    for (; i < n; i++) best = std::max(best, x[i]);
    for (i = 0; i < n; i++)
        if (x[i] == best) return i;
    return 0;
}

namespace {

// grow-only scratch buffers of the calling thread (the engine calls from one thread)
float* scratch(std::vector<float>& buf, int64_t n) {
    if ((int64_t)buf.size() < n) buf.resize(n);
    return buf.data();
}

struct Scratch {
    std::vector<float> qkv_in, qkv, ctx, hidden, act, x, normed, final;
};
Scratch& thread_scratch() {
    static thread_local Scratch s;
    return s;
}

constexpr int32_t TAP_FINAL = -2;

bool has_tap(const ss_step& step, int layer) {
    for (int32_t i = 0; i < step.n_taps; i++)
        if (step.tap_layers[i] == layer) return true;
    return false;
}

void copy_taps(const ss_step& step, int layer, const float* x, int64_t hidden) {
    const int64_t width = step.n_taps * hidden;
    for (int32_t i = 0; i < step.n_taps; i++) {
        if (step.tap_layers[i] != layer) continue;
        for (int64_t r = 0; r < step.n_rows; r++) {
            const int64_t row = step.tap_slot_rows ? step.attn.row_slot[r] * step.tap_slot_rows + step.attn.row_pos[r] : r;
            std::memcpy(step.tap_out + row * width + i * hidden, x + r * hidden, hidden * sizeof(float));
        }
    }
}

}  // namespace

void layer_forward(const ss_model& m, int layer, float* x, int64_t n, const float* input, int64_t prefix,
                   const float* prefix_input, const ss_attn& a) {
    const ss_layer& w = m.layers[layer];
    Scratch& s = thread_scratch();
    const int64_t hidden = m.hidden, k_in = w.qkv.k, total = prefix + n;
    const int64_t q_size = (int64_t)m.n_heads * m.head_dim, n_qkv = w.qkv.n;
    float* qkv_in = scratch(s.qkv_in, total * k_in);
    if (prefix) std::memcpy(qkv_in, prefix_input, prefix * k_in * sizeof(float));
    if (input) std::memcpy(qkv_in + prefix * k_in, input, n * k_in * sizeof(float));
    else rms_norm_rows(x, hidden, w.input_norm, qkv_in + prefix * k_in, k_in, n, hidden, m.eps);

    float* qkv = scratch(s.qkv, total * n_qkv);
    gemm(w.qkv, qkv_in, total, k_in, qkv, n_qkv, SS_OUT_STORE);
    float* ctx = scratch(s.ctx, n * q_size);
    attention_layer(m, layer, qkv, n_qkv, n, prefix, a, ctx);
    gemm(w.o, ctx, n, q_size, x, hidden, SS_OUT_ADD);

    float* h = scratch(s.hidden, n * hidden);
    rms_norm_rows(x, hidden, w.post_norm, h, hidden, n, hidden, m.eps);
    const int64_t width = m.intermediate_padded;
    float* act = scratch(s.act, n * width);
    gemm(w.gate_up, h, n, hidden, act, width, SS_OUT_SWIGLU);
    gemm(w.down, act, n, width, x, hidden, SS_OUT_ADD);
}

void embed_rows(const ss_model& m, const int64_t* tokens, int64_t n, float* x) {
    const int64_t hidden = m.hidden;
    for (int64_t r = 0; r < n; r++) {
        float* dst = x + r * hidden;
        if (m.embed_type == SS_W_BF16) {
            const uint16_t* src = static_cast<const uint16_t*>(m.embed) + tokens[r] * hidden;
            for (int64_t i = 0; i < hidden; i++) dst[i] = bf16_to_f32(src[i]);
        } else {
            std::memcpy(dst, static_cast<const float*>(m.embed) + tokens[r] * hidden, hidden * sizeof(float));
        }
    }
}

}  // namespace ss

extern "C" {

void ss_rms_norm(const float* x, const float* weight, float* out, int64_t m, int64_t dim, float eps) {
    ss::rms_norm_rows(x, dim, weight, out, dim, m, dim, eps);
}

void ss_layer_forward(const ss_model* m, int32_t layer, float* x, int64_t n_rows, const float* input,
                      int64_t prefix_rows, const float* prefix_input, const ss_attn* attn) {
    ss::layer_forward(*m, layer, x, n_rows, input, prefix_rows, prefix_input, *attn);
}

int32_t ss_model_forward(const ss_model* m, const ss_step* step) {
    using namespace ss;
    const int64_t n = step->n_rows, hidden = m->hidden;
    if (n <= 0) return 0;
    Scratch& s = thread_scratch();
    float* x = scratch(s.x, n * hidden);
    embed_rows(*m, step->tokens, n, x);
    copy_taps(*step, -1, x, hidden);
    for (int32_t l = 0; l < m->n_layers; l++) {
        layer_forward(*m, l, x, n, nullptr, 0, nullptr, step->attn);
        copy_taps(*step, l, x, hidden);
    }
    float* final = step->final_hidden;
    const bool final_tap = has_tap(*step, TAP_FINAL);
    if (!final && final_tap) final = scratch(s.final, n * hidden);
    if (final) rms_norm_rows(x, hidden, m->final_norm, final, hidden, n, hidden, m->eps);
    if (final_tap) copy_taps(*step, TAP_FINAL, final, hidden);
    if (step->logits && step->n_out > 0) {
        float* rows = scratch(s.normed, step->n_out * hidden);
        for (int64_t i = 0; i < step->n_out; i++) {
            const int64_t r = step->out_rows[i];
            if (final) std::memcpy(rows + i * hidden, final + r * hidden, hidden * 4);
            else rms_norm_rows(x + r * hidden, hidden, m->final_norm, rows + i * hidden, hidden, 1, hidden, m->eps);
        }
        gemm(m->head, rows, step->n_out, hidden, step->logits, m->vocab, SS_OUT_STORE);
        if (step->argmax)
            for (int64_t i = 0; i < step->n_out; i++) step->argmax[i] = argmax(step->logits + i * m->vocab, m->vocab);
    }
    return 0;
}

int32_t ss_model_draft_chain(const ss_model* m, const ss_step* first, int64_t n_more, const ss_chain_pick* pick,
                             const int64_t* id_map, int64_t* drafts) {
    // step 0 is `first` (its output rows: one per slot, in slot order); then one row per slot per step
    const int64_t n_slots = first->n_out, width = n_more + 1;
    ss_model_forward(m, first);
    std::vector<int64_t> slots(n_slots), pos(n_slots), fed(n_slots);
    std::vector<float> logits(n_slots * m->vocab);
    for (int64_t i = 0; i < n_slots; i++) {
        const int64_t r = first->out_rows[i];
        slots[i] = first->attn.row_slot[r];
        pos[i] = first->attn.row_pos[r];
        drafts[i * width] = ss::pick_draft(pick, i, 0, first->logits + i * m->vocab, m->vocab, id_map);
    }
    std::vector<int64_t> out_rows(n_slots);
    for (int64_t i = 0; i < n_slots; i++) out_rows[i] = i;
    int64_t j = 1;
    for (; j <= n_more && !ss::chain_cut_everywhere(pick, n_slots, j - 1); j++) {
        for (int64_t i = 0; i < n_slots; i++) {
            fed[i] = drafts[i * width + j - 1];
            pos[i] += 1;
        }
        ss_step step = {};
        step.n_rows = n_slots;
        step.tokens = fed.data();
        step.attn = first->attn;
        step.attn.row_slot = slots.data();
        step.attn.row_pos = pos.data();
        step.attn.key_len = nullptr;          // causal
        step.attn.rope_index = pos.data();    // tables indexed by position (Python checks the RoPE type)
        step.n_out = n_slots;
        step.out_rows = out_rows.data();
        step.logits = logits.data();
        ss_model_forward(m, &step);
        for (int64_t i = 0; i < n_slots; i++)
            drafts[i * width + j] = ss::pick_draft(pick, i, j, logits.data() + i * m->vocab, m->vocab, id_map);
    }
    ss::mark_unfed_drafts(drafts, n_slots, n_more, j);
    return 0;
}

}  // extern "C"
