// ngram-mod's pool (speculative/ngram_mod.py): adding a history's n-grams and drafting chained lookups, the
// n-gram's hash rolled one token at a time. In Python the adds (numpy, every 32 tokens) and the draft's
// hash of its window cost about 30 µs a step, a tenth of a decode step of the bundled model.
#include "kernels.h"

namespace {
constexpr uint64_t LCG64_FACTOR = 6364136223846793005ULL;
constexpr int32_t EMPTY = -1;

// the hash of tokens[0..n) (unsigned arithmetic wraps mod 2^64, as the pool's hash does), and the factor
// that rolls the oldest token out of it
uint64_t window_hash(const int64_t* tokens, int32_t n, uint64_t* top_power) {
    uint64_t h = 0, top = 1;
    for (int32_t i = 0; i < n; i++) {
        h = h * LCG64_FACTOR + static_cast<uint64_t>(tokens[i]);
        if (i) top *= LCG64_FACTOR;
    }
    *top_power = top;
    return h;
}
}  // namespace

extern "C" int64_t ss_ngram_mod_add(int32_t* entries, int64_t size, const int64_t* tokens, int64_t start,
                                    int64_t stop, int32_t n) {
    if (stop <= start) return 0;
    uint64_t top;
    uint64_t h = window_hash(tokens + start, n, &top);
    int64_t overwritten = 0;
    for (int64_t i = start; i < stop; i++) {
        if (i > start) h = (h - static_cast<uint64_t>(tokens[i - 1]) * top) * LCG64_FACTOR +
                           static_cast<uint64_t>(tokens[i + n - 1]);
        int32_t& entry = entries[h % static_cast<uint64_t>(size)];
        overwritten += entry != EMPTY;
        entry = static_cast<int32_t>(tokens[i + n]);
    }
    return overwritten;
}

extern "C" int64_t ss_ngram_mod_draft(const int32_t* entries, int64_t size, const int64_t* window, int32_t n,
                                      int64_t n_min, int64_t n_max, int64_t* out) {
    uint64_t top;
    uint64_t h = window_hash(window, n, &top);
    for (int64_t i = 0; i < n_max; i++) {
        const int32_t token = entries[h % static_cast<uint64_t>(size)];
        if (token == EMPTY) return i < n_min ? 0 : i;
        out[i] = token;
        // the oldest token of the window: window[i] while inside it, then an earlier draft
        const uint64_t oldest = static_cast<uint64_t>(i < n ? window[i] : out[i - n]);
        h = (h - oldest * top) * LCG64_FACTOR + static_cast<uint64_t>(token);
    }
    return n_max;
}
