// A small work pool for the kernels. Tasks are claimed one at a time from a shared counter,
// so the calling thread finishes the job alone when a helper is descheduled (another process on
// its core): a job never waits for a helper that has not started a task. Helpers spin briefly
// between jobs (a decode step issues a few dozen small jobs back to back), then sleep.
// When helpers keep finishing late (preempted in the middle of a task, so the caller waits for
// them), the pool runs jobs on the calling thread alone for a while and then tries again: a
// busy neighbour then costs about what one thread would, not a stall per job.
// One thread submits jobs at a time (the engine's step thread); tasks never submit jobs themselves.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace ss {

class Pool {
public:
    typedef void (*TaskFn)(void* ctx, int64_t task);

    static Pool& instance();
    void set_threads(int n_threads);        // 1 = the calling thread only
    int threads() const { return n_threads_; }
    void set_spin_us(int us) { spin_us_ = us; }
    // jobs run, jobs run on the calling thread alone, times the contention watch went solo
    void stats(int64_t* out) const { out[0] = jobs_; out[1] = solo_jobs_; out[2] = solo_entries_; }
    void count_inline_job() { jobs_++; }
    void run(int64_t n_tasks, TaskFn fn, void* ctx);

private:
    void stop_helpers();
    void helper_loop();
    void work(uint64_t gen);
    void note_job(double work_us, double wait_us, double cpu_us);

    int n_threads_ = 1;
    int spin_us_ = 300;
    std::vector<std::thread> helpers_;
    // generation: odd while the calling thread writes a job, even once it is published
    std::atomic<uint64_t> generation_{0};
    std::atomic<int> active_{0};            // helpers registered on the current job
    std::atomic<int64_t> next_task_{0};
    std::atomic<int64_t> done_tasks_{0};
    int64_t n_tasks_ = 0;
    TaskFn fn_ = nullptr;
    void* ctx_ = nullptr;
    std::atomic<bool> quit_{false};
    std::atomic<int> sleepers_{0};
    std::mutex mutex_;
    std::condition_variable wake_;
    // contention watch (calling thread only)
    double solo_until_us_ = 0;              // running alone until then (0: not)
    int64_t jobs_ = 0, solo_jobs_ = 0, solo_entries_ = 0;
    int window_jobs_ = 0;
    int window_stalls_ = 0;
    double sampled_wall_us_ = 0, sampled_cpu_us_ = 0;
    bool last_verdict_busy_ = false;
    bool probing_ = false;                  // the first verdict after a solo period
};

// Runs body(task) for task in [0, n_tasks) on the pool.
template <class Body>
inline void parallel_for(int64_t n_tasks, const Body& body) {
    if (n_tasks <= 0) return;
    if (n_tasks == 1 || Pool::instance().threads() == 1) {
        Pool::instance().count_inline_job();
        for (int64_t t = 0; t < n_tasks; t++) body(t);
        return;
    }
    Pool::instance().run(n_tasks, [](void* ctx, int64_t t) { (*static_cast<const Body*>(ctx))(t); },
                         const_cast<Body*>(&body));
}

}  // namespace ss
