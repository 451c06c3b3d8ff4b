// Library-level entry points: version, CPU features in use, threads.
#include "gemm_internal.h"
#include "pool.h"

extern "C" {

int32_t ss_version(void) { return 5; }

int32_t ss_features(void) {
    int32_t f = 0;
#ifdef SS_AVX512
    f |= 1;
#endif
#ifdef SS_AVX512BF16
    f |= 2;
#endif
    if (ss::amx_usable()) f |= 4;
    if (ss::amx_usable() && ss::amx_matches_avx512()) f |= 8;
#ifdef SS_AVX512VNNI
    f |= 16;
#endif
#ifdef SS_AVX2
    f |= 32;
#endif
    return f;
}

void ss_set_threads(int32_t n) { ss::Pool::instance().set_threads(n); }
int32_t ss_get_threads(void) { return ss::Pool::instance().threads(); }
void ss_set_spin_us(int32_t us) { ss::Pool::instance().set_spin_us(us); }
void ss_pool_stats(int64_t* out) { ss::Pool::instance().stats(out); }

}  // extern "C"
