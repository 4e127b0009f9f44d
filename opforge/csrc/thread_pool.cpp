// thread_pool.cpp: a small fork-join pool; the calling thread works alongside the workers.
#include "thread_pool.h"

#include <algorithm>
#include <chrono>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define OPFORGE_CPU_RELAX() _mm_pause()
#elif defined(__aarch64__)
#define OPFORGE_CPU_RELAX() __asm__ __volatile__("yield")
#else
#define OPFORGE_CPU_RELAX() std::this_thread::yield()
#endif

namespace opforge_core {

namespace {
thread_local bool in_chunk = false;  // nested parallel_for runs serially
thread_local bool solo = false;      // a ThreadPool::Solo is alive on this thread
}

ThreadPool::Solo::Solo(bool on) : was_(solo) { solo = on; }

ThreadPool::Solo::~Solo() { solo = was_; }

ThreadPool::ThreadPool(int num_threads) : shares_(new Share[size_t(std::max(num_threads, 1))]) {
  for (int i = 1; i < num_threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::entry(void* pool, int64_t n, int64_t grain, opf_range_fn fn, void* arg) {
  static_cast<ThreadPool*>(pool)->parallel_for(n, grain, fn, arg);
}

void ThreadPool::run_chunks(Job& job, int self) {
  in_chunk = true;
  for (int k = 0; k < job.threads; ++k) {
    Share& share = job.shares[(self + k) % job.threads];
    for (;;) {
      const int64_t index = share.next.fetch_add(1);
      if (index >= share.end) break;
      const int64_t begin = index * job.chunk;
      job.fn(job.arg, begin, std::min(job.n, begin + job.chunk));
    }
  }
  in_chunk = false;
}

template <class F>
bool ThreadPool::spin_until(F&& ready) {
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  for (;;) {
    for (int i = 0; i < 32; ++i) {  // the clock is read every 32 polls (~1-2 us)
      if (ready()) return true;
      OPFORGE_CPU_RELAX();
    }
    const auto waited = clock::now() - start;
    if (waited >= std::chrono::microseconds(kSpinMicros)) return ready();
    // Past the first few microseconds, poll between yields: on a loaded machine the core goes
    // to whoever else is runnable; on an idle one the yield returns at once.
    if (waited >= std::chrono::microseconds(kPauseMicros)) std::this_thread::yield();
  }
}

void ThreadPool::worker_loop(int self) {
  uint64_t seen = 0, alarm = 0;
  for (;;) {
    // The next job usually follows within microseconds (the next op's loop): poll for it
    // before sleeping. Either way the job is taken under the lock.
    spin_until([&] { return stop_.load(std::memory_order_relaxed) || generation_.load() != seen; });
    Job* job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      auto has_job = [&] { return job_ != nullptr && generation_ != seen; };
      ++sleeping_;
      wake_.wait(lock, [&] { return stop_ || has_job() || alarm_ != alarm; });
      --sleeping_;
      if (stop_) return;
      if (!has_job()) {  // woken by prewake: poll again
        alarm = alarm_;
        continue;
      }
      seen = generation_;
      job = job_;
      ++active_;
    }
    run_chunks(*job, self);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (--active_ == 0) done_.notify_one();
    }
  }
}

void ThreadPool::prewake() {
  if (sleeping_.load(std::memory_order_relaxed) == 0) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++alarm_;
  }
  wake_.notify_all();
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, opf_range_fn fn, void* arg) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  if (workers_.empty() || n <= grain || in_chunk || solo || !busy_.try_lock()) {
    fn(arg, 0, n);
    return;
  }
  std::lock_guard<std::mutex> owner(busy_, std::adopt_lock);
  int64_t threads = num_threads();
  Job job;
  job.fn = fn;
  job.arg = arg;
  job.n = n;
  // A few chunks per thread balances uneven work without much scheduling. Rounding the chunk
  // down leaves the remainder as a short last chunk: rounded up, 10 tasks made 5 chunks of 2,
  // 3 of them on one of 2 threads (a conv of 10 equal tasks ran 1.6x faster on 2, not 2x).
  job.chunk = std::max(grain, n / (threads * 4));
  const int64_t chunks = (n + job.chunk - 1) / job.chunk;
  job.shares = shares_.get();
  job.threads = int(threads);
  for (int64_t t = 0; t < threads; ++t) {
    job.shares[t].next.store(t * chunks / threads, std::memory_order_relaxed);
    job.shares[t].end = (t + 1) * chunks / threads;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &job;
    ++generation_;
  }
  wake_.notify_all();
  run_chunks(job, 0);
  // Every chunk is claimed: wait for the workers still running theirs (polling first, as they
  // are usually about to finish), then retire the job so a worker that wakes late cannot enter it.
  spin_until([&] { return active_.load(std::memory_order_acquire) == 0; });
  std::unique_lock<std::mutex> lock(mu_);
  done_.wait(lock, [&] { return active_ == 0; });
  job_ = nullptr;
}

}  // namespace opforge_core
