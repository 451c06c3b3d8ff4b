// How a draft chain picks each slot's next token (speculative/draft_chain.py's draft loop): the
// argmax, or with a temperature a draw with one uniform from the request's own sampler over the
// draft's logits, written out as the draft's q for rejection sampling; with p_min, the top-10
// candidates' top probability at T = 1, where the chain's draft is cut.
#include <algorithm>
#include <cmath>

#include "kernels.h"

namespace ss {

namespace {

// the k largest logits' indices, largest first (ties: the lower index first); returns k
int32_t top_logits(const float* logits, int64_t vocab, int32_t k, int64_t* top) {
    int32_t n = 0;
    for (int64_t v = 0; v < vocab; v++) {
        if (n == k && logits[v] <= logits[top[n - 1]]) continue;
        int32_t at = n < k ? n++ : k - 1;
        while (at > 0 && logits[top[at - 1]] < logits[v]) {
            top[at] = top[at - 1];
            at--;
        }
        top[at] = v;
    }
    return n;
}

}  // namespace

bool chain_cut_everywhere(const ss_chain_pick* p, int64_t n_slots, int64_t step) {
    if (!p || p->p_min <= 0.0f) return false;
    for (int64_t s = 0; s < n_slots; s++) {
        bool cut = false;
        for (int64_t j = 0; j <= step && !cut; j++) cut = p->top_prob[s * p->n_steps + j] < p->p_min;
        if (!cut) return false;
    }
    return true;
}

void mark_unfed_drafts(int64_t* drafts, int64_t n_slots, int64_t n_more, int64_t stopped_at) {
    if (stopped_at > n_more) return;          // every step ran
    for (int64_t t = stopped_at - 1; t <= n_more; t++)
        for (int64_t i = 0; i < n_slots; i++) drafts[i * (n_more + 1) + t] = -1;
}

int64_t pick_draft(const ss_chain_pick* p, int64_t slot, int64_t step, const float* logits, int64_t vocab,
                   const int64_t* id_map) {
    const bool sampled = p && p->temperature[slot] > 0.0f, cut_test = p && p->p_min > 0.0f;
    if (cut_test) {
        int64_t top[64];
        const int32_t k = top_logits(logits, vocab, (int32_t)std::min<int64_t>(p->p_min_k, vocab), top);
        double total = 0.0;
        for (int32_t i = 0; i < k; i++) total += std::exp((double)logits[top[i]] - logits[top[0]]);
        p->top_prob[slot * p->n_steps + step] = (float)(1.0 / total);
    }
    if (!sampled) {
        const int64_t best = argmax(logits, vocab);
        return id_map ? id_map[best] : best;
    }
    // q is the distribution the request samples the target from, over the draft's logits: where the
    // draft's logits match the target's, every draft is accepted
    const int64_t at = slot * p->n_steps + step;
    const int64_t pick = draw_draft(logits, vocab, p->top_k[slot], p->top_p[slot], p->min_p[slot], p->temperature[slot],
                                    p->uniforms[at], id_map, p->q + at * p->q_vocab, p->q_vocab);
    return id_map ? id_map[pick] : pick;
}

}  // namespace ss
