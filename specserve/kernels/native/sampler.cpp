// The target's sampling distribution and the draw from it, per row, as one call each: the chain of
// PyTorch operations they replace cost 0.2-0.3 ms a token, a third of a decode step.
//
// Order (llama.cpp's): top-k on the logits, then top-p and min-p on the temperature-1
// distribution of what is left, then the temperature. Ties at the top-k boundary are all kept.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels.h"
#include "pool.h"
#include "simd.h"

namespace ss {

// probs = softmax(x / temperature) over the whole row (nothing filtered), vectorized
void dense_softmax(const float* x, int64_t vocab, float temperature, float* probs) {
    const float best = row_max(x, vocab);
    double total = 0.0;
    int64_t i = 0;
#ifdef SS_AVX512
    const __m512 vbest = _mm512_set1_ps(best), inv_t = _mm512_set1_ps(1.0f / temperature);
    __m512 acc = _mm512_setzero_ps();
    for (; i + 16 <= vocab; i += 16) {
        const __m512 e = exp512(_mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(x + i), vbest), inv_t));
        _mm512_storeu_ps(probs + i, e);
        acc = _mm512_add_ps(acc, e);
    }
    total = _mm512_reduce_add_ps(acc);
#endif
    for (; i < vocab; i++) {
        probs[i] = std::exp((x[i] - best) / temperature);
        total += probs[i];
    }
    const float scale = (float)(1.0 / total);
    for (i = 0; i < vocab; i++) probs[i] *= scale;
}

namespace {

// the first index whose cumulative probability exceeds u * (row total), both summed in order in double;
// rounding can leave the target past the sum: then the last index with a positive probability
int64_t draw_row_in_order(const float* p, int64_t vocab, double u) {
    double total = 0.0;
    int64_t last = 0;
    for (int64_t i = 0; i < vocab; i++) {
        total += p[i];
        if (p[i] > 0.0f) last = i;
    }
    const double target = u * total;
    double cumulative = 0.0;
    for (int64_t i = 0; i < vocab; i++) {
        cumulative += p[i];
        if (cumulative > target && p[i] > 0.0f) return i;
    }
    return last;
}

}  // namespace

// draw_row_in_order's answer without its two passes of dependent additions (3 µs a row of 4096; a draft
// at 4 slots draws a dozen): sums of 64-value blocks in vector lanes find the block where the running sum
// passes u * total, and an in-order pass within it the index. Lanes add in another order, which moves a
// sum of n non-negative terms by at most n 2^-53 of the total: where the crossing is within kMargin of the
// total of either side, or the values are not finite and positive, the in-order draw decides.
int64_t draw_row(const float* p, int64_t vocab, double u) {
#ifdef SS_AVX512
    constexpr int64_t kBlock = 64;
    constexpr double kMargin = 1e-9;
    const int64_t n_blocks = (vocab + kBlock - 1) / kBlock;
    if (vocab < 2 * kBlock || vocab > (int64_t(1) << 24)) return draw_row_in_order(p, vocab, u);
    static thread_local std::vector<double> block_sums;
    block_sums.resize(n_blocks);
    double total = 0.0;
    for (int64_t b = 0; b < n_blocks; b++) {
        const float* x = p + b * kBlock;
        double sum = 0.0;
        if ((b + 1) * kBlock <= vocab) {
            __m512d acc = _mm512_setzero_pd();
            for (int j = 0; j < kBlock; j += 8) acc = _mm512_add_pd(acc, _mm512_cvtps_pd(_mm256_loadu_ps(x + j)));
            sum = _mm512_reduce_add_pd(acc);
        } else {
            for (int64_t i = b * kBlock; i < vocab; i++) sum += p[i];
        }
        block_sums[b] = sum;
        total += sum;
    }
    if (!(total > 0.0) || !std::isfinite(total)) return draw_row_in_order(p, vocab, u);
    const double target = u * total, margin = kMargin * total;
    double before = 0.0;
    int64_t b = 0;
    while (b < n_blocks && before + block_sums[b] <= target) before += block_sums[b++];
    if (b < n_blocks) {
        const int64_t end = std::min(vocab, (b + 1) * kBlock);
        for (int64_t i = b * kBlock; i < end; i++) {
            const double after = before + p[i];
            if (after > target) {
                if (after - target > margin && target - before > margin) return i;
                break;
            }
            before = after;
        }
    }
#endif
    return draw_row_in_order(p, vocab, u);
}

namespace {

// the k-th largest value: one pass with a min-heap of the k largest so far
float kth_by_heap(const float* x, int64_t n, int32_t k, std::vector<float>& heap) {
    heap.assign(x, x + k);
    std::make_heap(heap.begin(), heap.end(), std::greater<float>());
    for (int64_t i = k; i < n; i++) {
        if (x[i] > heap.front()) {
            std::pop_heap(heap.begin(), heap.end(), std::greater<float>());
            heap.back() = x[i];
            std::push_heap(heap.begin(), heap.end(), std::greater<float>());
        }
    }
    return heap.front();
}

// the k-th largest value. With AVX-512, over blocks of 16: the k-th largest of the blocks' maxima is a
// lower bound of it (those k maxima are k values at least that large), and only the few values at or
// above the bound can be among the k largest (a top-40 of 4096 in 2-3 µs instead of 9-10)
float kth_largest(const float* x, int64_t n, int32_t k, std::vector<float>& heap) {
#ifdef SS_AVX512
    const int64_t n_blocks = n / 16;
    if (n_blocks >= 2 * k) {
        heap.resize(n_blocks);
        for (int64_t b = 0; b < n_blocks; b++) heap[b] = _mm512_reduce_max_ps(_mm512_loadu_ps(x + 16 * b));
        std::nth_element(heap.begin(), heap.begin() + (k - 1), heap.end(), std::greater<float>());
        const float bound = heap[k - 1];
        heap.clear();
        const __m512 vb = _mm512_set1_ps(bound);
        for (int64_t b = 0; b < n_blocks; b++) {
            const __m512 v = _mm512_loadu_ps(x + 16 * b);
            for (__mmask16 m = _mm512_cmp_ps_mask(v, vb, _CMP_GE_OQ); m; m &= m - 1)
                heap.push_back(x[16 * b + __builtin_ctz(m)]);
        }
        for (int64_t i = 16 * n_blocks; i < n; i++)
            if (x[i] >= bound) heap.push_back(x[i]);
        if ((int64_t)heap.size() >= k) {        // (not so only when the row holds NaNs)
            std::nth_element(heap.begin(), heap.begin() + (k - 1), heap.end(), std::greater<float>());
            return heap[k - 1];
        }
    }
#endif
    return kth_by_heap(x, n, k, heap);
}

// the indices of x at or above threshold and above -inf, in order (blocks with none are passed over)
void indices_at_least(const float* x, int64_t vocab, float threshold, std::vector<int32_t>& kept) {
    kept.clear();
    int64_t i = 0;
#ifdef SS_AVX512
    const __m512 t = _mm512_set1_ps(threshold), low = _mm512_set1_ps(-INFINITY);
    for (; i + 16 <= vocab; i += 16) {
        const __m512 v = _mm512_loadu_ps(x + i);
        for (__mmask16 m = _mm512_cmp_ps_mask(v, t, _CMP_GE_OQ) & _mm512_cmp_ps_mask(v, low, _CMP_GT_OQ); m;
             m &= m - 1)
            kept.push_back((int32_t)(i + __builtin_ctz(m)));
    }
#endif
    for (; i < vocab; i++)
        if (x[i] >= threshold && x[i] > -INFINITY) kept.push_back((int32_t)i);
}

// out[j] = exp((x[kept[j]] - best) * scale), vectorized
void kept_exps(const float* x, const std::vector<int32_t>& kept, float best, float scale, std::vector<float>& out) {
    const size_t n = kept.size();
    out.resize(n);
    for (size_t j = 0; j < n; j++) out[j] = (x[kept[j]] - best) * scale;
    size_t j = 0;
#ifdef SS_AVX512
    for (; j + 16 <= n; j += 16) _mm512_storeu_ps(out.data() + j, exp512(_mm512_loadu_ps(out.data() + j)));
#endif
    for (; j < n; j++) out[j] = std::exp(out[j]);
}

struct Candidate {
    float x;
    int32_t id;
    float weight;       // exp(x - best)
};

// the mass (summed in double) and the number of the candidates whose logit is above t
void mass_above(const std::vector<float>& xs, const std::vector<float>& ws, float t, double& mass, size_t& count) {
    const size_t n = xs.size();
    double m = 0.0;
    size_t c = 0, j = 0;
#ifdef SS_AVX512
    const __m512 vt = _mm512_set1_ps(t);
    __m512d low = _mm512_setzero_pd(), high = _mm512_setzero_pd();
    for (; j + 16 <= n; j += 16) {
        const __mmask16 above = _mm512_cmp_ps_mask(_mm512_loadu_ps(xs.data() + j), vt, _CMP_GT_OQ);
        const __m512 w = _mm512_maskz_loadu_ps(above, ws.data() + j);
        low = _mm512_add_pd(low, _mm512_cvtps_pd(_mm512_castps512_ps256(w)));
        high = _mm512_add_pd(high, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(w), 1))));
        c += (size_t)__builtin_popcount(above);
    }
    m = _mm512_reduce_add_pd(_mm512_add_pd(low, high));
#endif
    for (; j < n; j++)
        if (xs[j] > t) {
            m += ws[j];
            c++;
        }
    mass = m;
    count = c;
}

// Keep the most likely tokens while the mass before them is below top_p (ties: the lower id first). The
// cut is bracketed by bisection on the logit value, each step one vectorized pass over the candidates
// (no sorting, no data-dependent branches): every candidate above the bracket is kept, and only the few
// inside it are sorted to find the exact cut. The sampling chain of a flat 4096-token row with a top-p of
// 0.95 took 0.46 ms sorting doubling prefixes, 0.06 ms partitioning around pivots, and less so.
void keep_top_p(const float* x, float best, float top_p, std::vector<int32_t>& kept) {
    static thread_local std::vector<float> xs, ws;
    static thread_local std::vector<Candidate> band;
    const size_t n = kept.size();
    kept_exps(x, kept, best, 1.0f, ws);
    xs.resize(n);
    float lo = best;
    for (size_t j = 0; j < n; j++) lo = std::min(lo, xs[j] = x[kept[j]]);
    lo -= 1.0f;                     // below every candidate: all of the mass is above it
    double total, mass_hi = 0.0;
    size_t count_lo, count_hi = 0;
    mass_above(xs, ws, lo, total, count_lo);
    const double target = top_p * total;
    float hi = best;                // nothing is above it: the mass above it is below the target
    while (count_lo - count_hi > 32) {
        const float mid = lo + 0.5f * (hi - lo);
        if (!(mid > lo && mid < hi)) break;                 // adjacent values: the bracket holds ties
        double mass;
        size_t count;
        mass_above(xs, ws, mid, mass, count);
        if (mass >= target) {
            lo = mid;
            count_lo = count;
        } else {
            hi = mid;
            mass_hi = mass;
            count_hi = count;
        }
    }
    size_t out = 0;
    band.clear();
    for (size_t j = 0; j < n; j++) {
        if (xs[j] > hi) kept[out++] = kept[j];
        else if (xs[j] > lo) band.push_back({xs[j], kept[j], ws[j]});
    }
    std::sort(band.begin(), band.end(), [](const Candidate& a, const Candidate& b) {
        return a.x > b.x || (a.x == b.x && a.id < b.id);
    });
    double before = mass_hi;
    for (const Candidate& e : band) {
        if (out > 0 && before >= target) break;
        kept[out++] = e.id;
        before += e.weight;
    }
    kept.resize(out);
}

}  // namespace

void row_probs(const float* x, int64_t vocab, int32_t top_k, float top_p, float min_p, float temperature,
               float* probs, std::vector<int32_t>& kept, std::vector<float>& heap) {
    const bool by_k = top_k > 0 && top_k < vocab;
    if (!by_k && top_p >= 1.0f && min_p <= 0.0f) return dense_softmax(x, vocab, temperature, probs);
    const float threshold = by_k ? kth_largest(x, vocab, top_k, heap) : -INFINITY;
    indices_at_least(x, vocab, threshold, kept);
    float best = -INFINITY;
    for (int32_t i : kept) best = std::max(best, x[i]);
    if (top_p < 1.0f && kept.size() > 1) keep_top_p(x, best, top_p, kept);
    if (min_p > 0.0f && kept.size() > 1) {         // p_i < min_p * p_max: x_i - best < log(min_p)
        const double floor = std::log((double)min_p);
        size_t n = 0;
        for (int32_t i : kept)
            if ((double)x[i] - best >= floor) kept[n++] = i;
        kept.resize(n);
    }
    static thread_local std::vector<float> weights;
    kept_exps(x, kept, best, 1.0f / temperature, weights);
    double total = 0.0;
    for (float w : weights) total += w;
    std::fill(probs, probs + vocab, 0.0f);
    const float scale = (float)(1.0 / total);
    for (size_t j = 0; j < kept.size(); j++) probs[kept[j]] = weights[j] * scale;
}

int64_t draw_draft(const float* logits, int64_t vocab, int32_t top_k, float top_p, float min_p, float temperature,
                   double u, const int64_t* id_map, float* q, int64_t q_vocab) {
    static thread_local std::vector<float> probs, heap;
    static thread_local std::vector<int32_t> kept;
    float* row = id_map ? (probs.resize(vocab), probs.data()) : q;
    row_probs(logits, vocab, top_k, top_p, min_p, temperature, row, kept, heap);
    const int64_t pick = draw_row(row, vocab, u);
    if (id_map) {
        std::fill(q, q + q_vocab, 0.0f);
        for (int64_t v = 0; v < vocab; v++) q[id_map[v]] = row[v];
    }
    return pick;
}

}  // namespace ss

extern "C" {

void ss_sampling_probs(const float* logits, int64_t n_rows, int64_t vocab, int32_t top_k, float top_p, float min_p,
                       float temperature, float* probs) {
    ss::parallel_for(n_rows, [&](int64_t r) {
        static thread_local std::vector<int32_t> kept;
        static thread_local std::vector<float> heap;
        ss::row_probs(logits + r * vocab, vocab, top_k, top_p, min_p, temperature, probs + r * vocab, kept, heap);
    });
}

// tokens[r] = the first index whose cumulative probability exceeds uniforms[r] * (row total)
void ss_sample(const float* probs, int64_t n_rows, int64_t vocab, const double* uniforms, int64_t* tokens) {
    for (int64_t r = 0; r < n_rows; r++) tokens[r] = ss::draw_row(probs + r * vocab, vocab, uniforms[r]);
}

// One slot's verification straight from the target's logits rows [k + 1, vocab] (speculative/verify.py):
// row n's sampling distribution is worked out only once drafts 0..n-1 are accepted, and most steps stop
// at the first rows. With q (the draft's distributions [k, vocab]): accept d_n while q(d_n) > 0 and
// u_n * q(d_n) <= p(d_n); at the first rejection the token is a draw from max(0, p - q) (from p where that
// is zero everywhere) with u_k; with everything accepted the bonus is a draw from p_k with u_k. Without
// q (sample and compare): y_n is the draw from p_n with u_n, accepted while y_n == d_n; the first y_n
// that differs (or y_k) is the token. Returns the number accepted; *token the target's token after them;
// -1 for a draft token outside the vocabulary.
int64_t ss_verify_logits(const float* logits, int64_t k, int64_t vocab, int32_t top_k, float top_p, float min_p,
                         float temperature, const float* q, const int64_t* draft, const double* uniforms,
                         int64_t* token) {
    static thread_local std::vector<float> probs, residual, heap;
    static thread_local std::vector<int32_t> kept;
    for (int64_t n = 0; n < k; n++)
        if (draft[n] < 0 || draft[n] >= vocab) return -1;     // q and p are indexed by the drafts
    probs.resize(vocab);
    for (int64_t n = 0;; n++) {
        const float* p = probs.data();
        ss::row_probs(logits + n * vocab, vocab, top_k, top_p, min_p, temperature, probs.data(), kept, heap);
        if (q == nullptr) {
            *token = ss::draw_row(p, vocab, uniforms[n]);
            if (n == k || *token != draft[n]) return n;
            continue;
        }
        if (n == k) {
            *token = ss::draw_row(p, vocab, uniforms[k]);
            return n;
        }
        const float* qn = q + n * vocab;
        const double qd = qn[draft[n]], pd = p[draft[n]];
        if (qd > 0.0 && uniforms[n] * qd <= pd) continue;
        residual.resize(vocab);
        double total = 0.0;
        for (int64_t i = 0; i < vocab; i++) {
            residual[i] = std::max(0.0f, p[i] - qn[i]);
            total += residual[i];
        }
        *token = ss::draw_row(total > 0.0 ? residual.data() : p, vocab, uniforms[k]);
        return n;
    }
}

}  // extern "C"
