// The HTTP server's worker threads (cpp-httplib serves each connection on one thread of its
// task queue). httplib's own ThreadPool starts all of them at once and keeps them for good: with
// --max-connections 512 that is 516 threads whose stacks and glibc per-thread malloc caches
// (tcache: a few chunks per size class, held by each thread, returned only when it exits) stay
// resident however idle the server is, and grow as each thread meets more kinds of request.
// This pool starts a thread only when a connection finds none idle, up to max_threads, and lets
// a thread that waited idle_exit without work exit (keeping min_threads), so an idle server holds
// what its few threads need, not its past peak (scripts/soak.py checks that RSS stays flat).
#pragma once
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

namespace tq {

class WorkerPool : public httplib::TaskQueue {
 public:
  // live_threads (optional) is kept equal to the number of threads alive, for /metrics.
  WorkerPool(size_t max_threads, size_t min_threads, std::chrono::milliseconds idle_exit,
             std::shared_ptr<std::atomic<int>> live_threads = nullptr);
  ~WorkerPool() override;
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Runs fn on an idle thread, or a new one when none is idle and fewer than max_threads live;
  // otherwise fn waits for the next thread that finishes a job. Ignored after shutdown().
  void enqueue(std::function<void()> fn) override;
  // Runs the jobs already queued, then joins every thread. Idempotent.
  void shutdown() override;

  size_t live_threads() const;

 private:
  void work(uint64_t id);
  void set_live_locked();

  const size_t max_threads_, min_threads_;
  const std::chrono::milliseconds idle_exit_;
  std::shared_ptr<std::atomic<int>> live_out_;
  mutable std::mutex mu_;
  std::condition_variable has_job_;
  std::deque<std::function<void()>> jobs_;
  std::unordered_map<uint64_t, std::thread> threads_;  // alive, by id
  std::vector<std::thread> exited_;                    // left on idle: joined by the next enqueue/shutdown
  bool trim_pending_ = false;                          // threads left since the last malloc_trim
  size_t idle_ = 0;                                    // threads alive and not running a job
  uint64_t next_id_ = 0;
  bool shutdown_ = false;
};

}  // namespace tq
