// A hidden-state draft head's draft chain (EAGLE-3, MTP) in one call. Each step feeds (token,
// hidden) rows: the head combines the token's embedding with the hidden row, runs its decoder
// layers over its own cache, and its output rows give the draft (argmax or a draw) and the hidden row that is
// fed back with that draft at the next position. In Python every step ran a dozen small operations
// between native calls, on cold caches, and cost more than the head's layers.
#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels.h"

namespace ss {
namespace {

float* grow(std::vector<float>& buf, int64_t n) {
    if ((int64_t)buf.size() < n) buf.resize(n);
    return buf.data();
}

struct ChainBuffers {
    std::vector<float> embed, parts, x, normed, logits;
};

// Step j over n rows (tokens, hidden_in, positions in attn). Output rows out_rows[i] give drafts[i]
// (target ids, picked by `pick`) and hidden_out[i] (the row fed back next step).
void head_step(const ss_model& m, const ss_head_chain& h, int64_t n, const int64_t* tokens, const float* hidden_in,
               const ss_attn& attn, int64_t n_out, const int64_t* out_rows, const ss_chain_pick* pick, int64_t j,
               int64_t* drafts, float* hidden_out, ChainBuffers& b) {
    const int64_t hidden = m.hidden, wide = 2 * hidden;
    float* e = grow(b.embed, n * hidden);
    embed_rows(m, tokens, n, e);
    if (h.zero_embed_at_pos0)
        for (int64_t r = 0; r < n; r++)
            if (attn.row_pos[r] == 0) std::fill(e + r * hidden, e + (r + 1) * hidden, 0.0f);
    // parts = [norm_e(e), norm_h(hidden)] per row (or hidden first), as the Python head concatenates them
    float* parts = grow(b.parts, n * wide);
    const int64_t e_at = h.hidden_first ? hidden : 0, h_at = h.hidden_first ? 0 : hidden;
    rms_norm_rows(e, hidden, h.embed_norm, parts + e_at, wide, n, hidden, m.eps);
    rms_norm_rows(hidden_in, hidden, h.hidden_norm, parts + h_at, wide, n, hidden, m.eps);
    float* x = grow(b.x, n * hidden);
    int32_t first = 0;
    if (h.proj.data) {          // MTP: the block's residual stream starts at proj(parts)
        gemm(h.proj, parts, n, wide, x, hidden, SS_OUT_STORE);
    } else {                    // EAGLE-3: layer 0 reads parts; its residual is the hidden row (or its norm)
        for (int64_t r = 0; r < n; r++)
            std::memcpy(x + r * hidden, h.residual_normed ? parts + r * wide + h_at : hidden_in + r * hidden,
                        hidden * sizeof(float));
        layer_forward(m, 0, x, n, parts, 0, nullptr, attn);
        first = 1;
    }
    for (int32_t l = first; l < m.n_layers; l++) layer_forward(m, l, x, n, nullptr, 0, nullptr, attn);

    float* normed = grow(b.normed, n_out * hidden);
    for (int64_t i = 0; i < n_out; i++)
        rms_norm_rows(x + out_rows[i] * hidden, hidden, m.final_norm, normed + i * hidden, hidden, 1, hidden, m.eps);
    float* logits = grow(b.logits, n_out * m.vocab);
    gemm(m.head, normed, n_out, hidden, logits, m.vocab, SS_OUT_STORE);
    for (int64_t i = 0; i < n_out; i++) {
        drafts[i] = pick_draft(pick, i, j, logits + i * m.vocab, m.vocab, h.id_map);
        std::memcpy(hidden_out + i * hidden, h.feed_normed ? normed + i * hidden : x + out_rows[i] * hidden,
                    hidden * sizeof(float));
    }
}

}  // namespace
}  // namespace ss

extern "C" int32_t ss_head_draft_chain(const ss_model* m, const ss_head_chain* h, int64_t n_more,
                                       const ss_chain_pick* pick, int64_t* drafts) {
    using namespace ss;
    static thread_local ChainBuffers buffers;
    const int64_t n_slots = h->n_out, width = n_more + 1, hidden = m->hidden;
    std::vector<int64_t> picked(n_slots), slots(n_slots), pos(n_slots), fed(n_slots), out_rows(n_slots);
    std::vector<float> fed_hidden(n_slots * hidden), next_hidden(n_slots * hidden);
    const float* hidden_in = h->hidden_in;
    if (h->fc.data) {           // one product here instead of a separate call from Python before the chain
        static thread_local std::vector<float> projected;
        hidden_in = grow(projected, h->n_rows * hidden);
        gemm(h->fc, h->hidden_in, h->n_rows, h->fc.k, projected.data(), hidden, SS_OUT_STORE);
    }
    head_step(*m, *h, h->n_rows, h->tokens, hidden_in, h->attn, n_slots, h->out_rows, pick, 0, picked.data(),
              fed_hidden.data(), buffers);
    for (int64_t i = 0; i < n_slots; i++) {
        const int64_t r = h->out_rows[i];
        slots[i] = h->attn.row_slot[r];
        pos[i] = h->attn.row_pos[r];
        drafts[i * width] = picked[i];
        out_rows[i] = i;
    }
    ss_attn attn = h->attn;
    attn.row_slot = slots.data();
    attn.row_pos = pos.data();
    attn.key_len = nullptr;             // causal
    attn.rope_index = pos.data();       // tables indexed by position (Python checks the RoPE type)
    int64_t j = 1;
    for (; j <= n_more && !chain_cut_everywhere(pick, n_slots, j - 1); j++) {
        for (int64_t i = 0; i < n_slots; i++) {
            fed[i] = drafts[i * width + j - 1];
            pos[i] += 1;
        }
        head_step(*m, *h, n_slots, fed.data(), fed_hidden.data(), attn, n_slots, out_rows.data(), pick, j,
                  picked.data(), next_hidden.data(), buffers);
        std::swap(fed_hidden, next_hidden);
        for (int64_t i = 0; i < n_slots; i++) drafts[i * width + j] = picked[i];
    }
    mark_unfed_drafts(drafts, n_slots, n_more, j);
    return 0;
}
