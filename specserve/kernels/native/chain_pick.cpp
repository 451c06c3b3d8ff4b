// How a draft chain picks each slot's next token (speculative/draft_chain.py's draft loop): the
// argmax, or with a temperature a draw from softmax(top-k logits / T) with one uniform, the k
// candidates and their probabilities written out as the draft's q for rejection sampling.
#include <algorithm>
#include <cmath>

#include "kernels.h"

namespace ss {

int64_t pick_draft(const ss_chain_pick* p, int64_t slot, int64_t step, const float* logits, int64_t vocab,
                   const int64_t* id_map) {
    if (!p || p->temperature[slot] <= 0.0f) {
        const int64_t best = argmax(logits, vocab);
        return id_map ? id_map[best] : best;
    }
    // the k largest logits, largest first (ties: the lower index first)
    const int32_t k = (int32_t)std::min<int64_t>(p->top_k, vocab);
    int64_t top[64];
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
    const int64_t at_row = (slot * p->n_steps + step) * p->top_k;
    const double inv_t = 1.0 / p->temperature[slot];
    double total = 0.0, weights[64];
    for (int32_t i = 0; i < k; i++) total += weights[i] = std::exp(((double)logits[top[i]] - logits[top[0]]) * inv_t);
    float* q = p->cand_q + at_row;
    int64_t* ids = p->cand_ids + at_row;
    for (int32_t i = 0; i < k; i++) {
        q[i] = (float)(weights[i] / total);
        ids[i] = id_map ? id_map[top[i]] : top[i];
    }
    return ids[draw_row(q, k, p->uniforms[slot * p->n_steps + step])];
}

}  // namespace ss
