// thread_pool.h: the host's worker threads, lent to ops through opf_compute_ctx::parallel_for.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "opforge/abi.h"

namespace opforge_core {

/// A fixed set of workers running one parallel_for at a time. A call made while the pool is
/// busy (another thread's op, or a nested call from inside a chunk) runs serially instead of
/// waiting, so ops never deadlock on the pool. Each thread owns a fixed share of every call's
/// chunks (thread t the t-th run of them, the caller the first) and takes its own first, then
/// what the others have not yet taken: consecutive ops split alike hand each thread the part of
/// the data it wrote itself, which stays in its own caches. A worker that finishes a job, and a
/// caller whose workers are finishing theirs, spin for at most kSpinMicros before sleeping:
/// consecutive ops' loops then hand off without a futex wake-up, and an idle or loaded machine
/// loses at most that much CPU per job (polling between yields after kPauseMicros, so a
/// runnable thread gets the core).
class ThreadPool {
 public:
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  /// How long a thread polls for the next job, or for the workers to finish, before sleeping.
  /// On a VM a sleeping vCPU halts, and waking it again took far longer than a futex call.
  /// 2 threads, in-process alternation (Zen 3 VM, 2 vCPUs, load 1.3-1.7), times with 2 ms over
  /// times with 50 us: resnet50 0.935-0.941, squeezenet 0.969, crnn 0.974, mobile_se_cnn
  /// 0.95-1.01, a Loop decoder 0.89-0.91, an If model 0.83-0.87; 5 ms gained nothing more.
  static constexpr int kSpinMicros = 2000;
  /// For how much of that it polls without yielding the core.
  static constexpr int kPauseMicros = 5;

  int num_threads() const { return int(workers_.size()) + 1; }
  void parallel_for(int64_t n, int64_t grain, opf_range_fn fn, void* arg);
  /// Wakes the workers that sleep, to poll for a job for up to kSpinMicros: a plan calls it as
  /// a run starts (a run begins after its caller's own work, often past the workers' polling),
  /// so that the first parallel op finds them awake instead of waking them with its job and
  /// running most of it alone meanwhile. Costs nothing when none sleeps.
  void prewake();

  /// The C entry point stored in opf_compute_ctx.
  static void entry(void* pool, int64_t n, int64_t grain, opf_range_fn fn, void* arg);

  /// While one is alive on a thread, the parallel_for calls made there run on that thread alone,
  /// as a call made while the pool is busy does. Ops see the same thread count and split their
  /// work as before, so results do not change: a plan runs a step this way where its workers
  /// made it slower (a second vCPU that is an SMT sibling, or busy with another process).
  class Solo {
   public:
    explicit Solo(bool on);
    ~Solo();
    Solo(const Solo&) = delete;
    Solo& operator=(const Solo&) = delete;

   private:
    bool was_;
  };

 private:
  /// One thread's share of a call's chunks: indices [next, end) still to take (a cache line each).
  struct alignas(64) Share {
    std::atomic<int64_t> next{0};
    int64_t end = 0;
  };
  struct Job {
    opf_range_fn fn;
    void* arg;
    int64_t n, chunk;
    Share* shares;  ///< num_threads() of them
    int threads;
  };
  void worker_loop(int self);
  /// Runs chunks of `job`, thread `self`'s share first, then the others'.
  static void run_chunks(Job& job, int self);
  /// Polls `ready` for at most kSpinMicros; whether it became true.
  template <class F>
  static bool spin_until(F&& ready);

  std::vector<std::thread> workers_;
  std::unique_ptr<Share[]> shares_;  // the running call's shares, one per thread
  std::mutex busy_;            // held by the caller of the running parallel_for
  std::mutex mu_;
  std::condition_variable wake_, done_;
  // Written under mu_; atomic so that spinning threads may read them without it.
  std::atomic<uint64_t> generation_{0};
  std::atomic<bool> stop_{false};
  std::atomic<int> active_{0};  // workers inside the current job
  std::atomic<int> sleeping_{0};  // workers waiting on wake_
  uint64_t alarm_ = 0;            // bumped (under mu_) by prewake
  Job* job_ = nullptr;          // the job in flight, cleared once every worker has left it
};

}  // namespace opforge_core
