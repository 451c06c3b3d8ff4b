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

Pool& Pool::instance() {
    static Pool pool;
    return pool;
}

Pool::~Pool() { stop_helpers(); }

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
constexpr int kWindowJobs = 64;          // jobs per contention check
constexpr int kStallsToGoSolo = 8;       // helpers late in this many jobs of a window: a busy core
constexpr double kMinCpuShare = 0.85;    // the caller ran less than this share of a window: oversubscribed
constexpr double kMaxWindowUs = 50000;   // longer windows had idle gaps (no requests): not evidence
constexpr int64_t kSoloJobs = 4000;      // then this many jobs (a few hundred decode steps) alone
constexpr double kStallMinUs = 30.0;

double thread_cpu_us() {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}
double wall_us() {
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

// Called after each job with the caller's own share of it and how long it then waited for helpers.
// Two signs of a core taken by another process: helpers finishing late (preempted mid-task), and the
// caller itself getting well under a full core over a window of back-to-back jobs.
void Pool::note_wait(double work_us, double wait_us) {
    if (window_jobs_ == 0) {
        window_wall_us_ = wall_us();
        window_cpu_us_ = thread_cpu_us();
    }
    window_jobs_++;
    if (wait_us > kStallMinUs && wait_us > work_us) window_stalls_++;
    if (window_jobs_ < kWindowJobs) return;
    const double wall = wall_us() - window_wall_us_, cpu = thread_cpu_us() - window_cpu_us_;
    const bool starved = wall < kMaxWindowUs && cpu < kMinCpuShare * wall;
    if (window_stalls_ >= kStallsToGoSolo || starved) solo_jobs_left_ = kSoloJobs;
    window_jobs_ = window_stalls_ = 0;
}

void Pool::run(int64_t n_tasks, TaskFn fn, void* ctx) {
    if (solo_jobs_left_ > 0) {
        solo_jobs_left_--;
        for (int64_t t = 0; t < n_tasks; t++) fn(ctx, t);
        return;
    }
    const auto start = std::chrono::steady_clock::now();
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
    const auto claimed = std::chrono::steady_clock::now();
    while (done_tasks_.load(std::memory_order_acquire) < n_tasks) SS_PAUSE();
    const auto end = std::chrono::steady_clock::now();
    note_wait(std::chrono::duration<double, std::micro>(claimed - start).count(),
              std::chrono::duration<double, std::micro>(end - claimed).count());
}

}  // namespace ss
