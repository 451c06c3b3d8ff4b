#include "pool.h"

#include <ctime>

#include <chrono>
#if defined(__x86_64__)
#include <immintrin.h>
#define SS_PAUSE() _mm_pause()
#else
#define SS_PAUSE() std::this_thread::yield()
#endif

namespace ss {

// Never destroyed: at interpreter exit a daemon thread may still be inside a job, and a destructor
// would pull the pool from under it. The process's exit ends the helper threads.
Pool& Pool::instance() {
    static Pool* pool = new Pool();
    return *pool;
}

void Pool::stop_helpers() {
    if (helpers_.empty()) return;
    quit_.store(true);
    {
        std::lock_guard<std::mutex> lock(mutex_);
        generation_.fetch_add(2);
    }
    wake_.notify_all();
    for (auto& t : helpers_) t.join();
    helpers_.clear();
    quit_.store(false);
}

void Pool::set_threads(int n_threads) {
    if (n_threads < 1) n_threads = 1;
    if (n_threads == n_threads_) return;
    stop_helpers();
    n_threads_ = n_threads;
    for (int i = 1; i < n_threads_; i++) helpers_.emplace_back([this] { helper_loop(); });
}

void Pool::work(uint64_t gen) {
    active_.fetch_add(1);
    if (generation_.load() == gen) {      // still the job we saw: its fields are stable
        for (int64_t t = next_task_.fetch_add(1); t < n_tasks_; t = next_task_.fetch_add(1)) {
            fn_(ctx_, t);
            done_tasks_.fetch_add(1, std::memory_order_release);
        }
    }
    active_.fetch_sub(1);
}

void Pool::helper_loop() {
    uint64_t seen = generation_.load();
    while (!quit_.load(std::memory_order_relaxed)) {
        uint64_t gen = generation_.load(std::memory_order_acquire);
        if (gen != seen && (gen & 1) == 0) {
            seen = gen;
            work(gen);
            continue;
        }
        // spin for a while, then sleep until the next job
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(spin_us_);
        bool got = false;
        while (std::chrono::steady_clock::now() < deadline) {
            for (int i = 0; i < 32; i++) SS_PAUSE();
            gen = generation_.load(std::memory_order_acquire);
            if ((gen != seen && (gen & 1) == 0) || quit_.load(std::memory_order_relaxed)) {
                got = true;
                break;
            }
        }
        if (got) continue;
        std::unique_lock<std::mutex> lock(mutex_);
        sleepers_.fetch_add(1);
        wake_.wait(lock, [&] {
            const uint64_t g = generation_.load();
            return quit_.load() || (g != seen && (g & 1) == 0);
        });
        sleepers_.fetch_sub(1);
    }
}

namespace {
constexpr int kSampleEvery = 8;          // jobs whose CPU share is measured (a clock read costs ~0.3 us)
constexpr double kJudgeAfterUs = 5000;   // sampled job time per verdict: a lone preemption is not a busy core
constexpr double kMaxStallShare = 0.1;   // helpers late in more than this share of the jobs: a busy core
constexpr double kMinCpuShare = 0.85;    // the caller ran less than this share of its sampled jobs: the same
constexpr double kSoloUs = 1e6;          // then a second alone before looking again
constexpr double kStallMinUs = 30.0;

double thread_cpu_us() {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}
double now_us() {
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

// After each job: the caller's own share of it, how long it then waited for helpers and, for sampled
// jobs, the CPU time it got during the job. Two signs of a core taken by another process: helpers
// finishing late (preempted mid-task), and the caller running well under a full core while it had
// work (a job keeps it busy from start to end, so idle gaps between requests never count).
void Pool::note_job(double work_us, double wait_us, double cpu_us) {
    window_jobs_++;
    if (wait_us > kStallMinUs && wait_us > work_us) window_stalls_++;
    if (cpu_us >= 0) {
        sampled_wall_us_ += work_us + wait_us;
        sampled_cpu_us_ += cpu_us;
    }
    if (sampled_wall_us_ < kJudgeAfterUs) return;
    const bool starved = sampled_cpu_us_ < kMinCpuShare * sampled_wall_us_;
    const bool busy = window_stalls_ > kMaxStallShare * window_jobs_ || starved;
    // from normal running, twice in a row (a transient such as start-up is not enough); right after a
    // solo period, once: the neighbour is most likely still there
    if (busy && (last_verdict_busy_ || probing_)) {
        solo_until_us_ = now_us() + kSoloUs;
        solo_entries_++;
    }
    last_verdict_busy_ = busy;
    probing_ = false;
    window_jobs_ = window_stalls_ = 0;
    sampled_wall_us_ = sampled_cpu_us_ = 0;
}

void Pool::run(int64_t n_tasks, TaskFn fn, void* ctx) {
    jobs_++;
    if (solo_until_us_ > 0) {
        if (now_us() < solo_until_us_) {
            solo_jobs_++;
            for (int64_t t = 0; t < n_tasks; t++) fn(ctx, t);
            return;
        }
        solo_until_us_ = 0;
        probing_ = true;
        window_jobs_ = window_stalls_ = 0;
        sampled_wall_us_ = sampled_cpu_us_ = 0;
    }
    const bool sampled = jobs_ % kSampleEvery == 0;
    const double cpu_start = sampled ? thread_cpu_us() : 0;
    const double start = now_us();
    // close the previous job: no helper may still be reading its fields
    const uint64_t writing = generation_.fetch_add(1) + 1;     // odd
    while (active_.load() != 0) SS_PAUSE();
    fn_ = fn;
    ctx_ = ctx;
    n_tasks_ = n_tasks;
    next_task_.store(0);
    done_tasks_.store(0);
    generation_.store(writing + 1);                             // even: published
    if (sleepers_.load() > 0) {
        { std::lock_guard<std::mutex> lock(mutex_); }
        wake_.notify_all();
    }
    for (int64_t t = next_task_.fetch_add(1); t < n_tasks; t = next_task_.fetch_add(1)) {
        fn(ctx, t);
        done_tasks_.fetch_add(1, std::memory_order_release);
    }
    // wait only for tasks a helper has started
    const double claimed = now_us();
    while (done_tasks_.load(std::memory_order_acquire) < n_tasks) SS_PAUSE();
    const double end = now_us();
    note_job(claimed - start, end - claimed, sampled ? thread_cpu_us() - cpu_start : -1.0);
}

}  // namespace ss
