#include "server/worker_pool.h"

#include <cstdio>
#include <system_error>
#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <utility>

namespace tq {

WorkerPool::WorkerPool(size_t max_threads, size_t min_threads, std::chrono::milliseconds idle_exit,
                       std::shared_ptr<std::atomic<int>> live_threads)
    : max_threads_(max_threads < 1 ? 1 : max_threads),
      min_threads_(min_threads < 1 ? 1 : (min_threads > max_threads_ ? max_threads_ : min_threads)),
      idle_exit_(idle_exit),
      live_out_(std::move(live_threads)) {
  // The kept threads start now, so a job always has a thread to wait for even when starting a
  // new one fails later (the system's thread limit).
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < min_threads_; ++i) {
    const uint64_t id = next_id_++;
    threads_.emplace(id, std::thread(&WorkerPool::work, this, id));
    ++idle_;
  }
  set_live_locked();
}

WorkerPool::~WorkerPool() { shutdown(); }

void WorkerPool::set_live_locked() {
  if (live_out_) live_out_->store(static_cast<int>(threads_.size()));
}

void WorkerPool::enqueue(std::function<void()> fn) {
  std::vector<std::thread> exited;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shutdown_) return;
    jobs_.push_back(std::move(fn));
    exited.swap(exited_);
    // Every idle thread may already be promised to an earlier job that it has not picked up yet.
    if (idle_ < jobs_.size() && threads_.size() < max_threads_) {
      const uint64_t id = next_id_++;
      try {
        threads_.emplace(id, std::thread(&WorkerPool::work, this, id));
        ++idle_;  // counted from its start, or the next job would start another thread meanwhile
        set_live_locked();
      } catch (const std::system_error& e) {
        // The job waits for a running thread instead; the kept threads guarantee there is one.
        std::fprintf(stderr, "http: cannot start a worker thread (%s); the connection waits for a free one\n",
                     e.what());
      }
    }
  }
  has_job_.notify_one();
  for (std::thread& t : exited) t.join();  // they have left work(): joining is immediate
}

void WorkerPool::work(uint64_t id) {
  std::unique_lock<std::mutex> lock(mu_);
  // This thread is counted in idle_ whenever it is not running a job.
  for (;;) {
    has_job_.wait_for(lock, idle_exit_, [this] { return !jobs_.empty() || shutdown_; });
    if (!jobs_.empty()) {
      std::function<void()> job = std::move(jobs_.front());
      jobs_.pop_front();
      --idle_;
      lock.unlock();
      job();
      job = nullptr;  // the connection's state goes before the lock is taken again
      lock.lock();
      ++idle_;
      continue;
    }
    if (shutdown_) {
      --idle_;
      return;  // shutdown() joins it
    }
    if (threads_.size() > min_threads_) {
      // Idle for idle_exit: leave, handing this thread's handle to whoever joins next. Its
      // glibc tcache goes back to the arena as it exits.
      auto self = threads_.find(id);
      exited_.push_back(std::move(self->second));
      threads_.erase(self);
      --idle_;
      trim_pending_ = true;
      set_live_locked();
      return;
    }
#if defined(__GLIBC__)
    if (trim_pending_) {
      // A kept thread, idle for idle_exit after others left: what they and their connections
      // freed since the engine's idle trim sits in glibc's arenas; give it back to the system
      // so an idle server's RSS is what it holds (scripts/soak.py checks that it stays flat).
      trim_pending_ = false;
      lock.unlock();
      malloc_trim(0);
      lock.lock();
    }
#endif
  }
}

void WorkerPool::shutdown() {
  std::vector<std::thread> all;
  {
    std::lock_guard<std::mutex> lock(mu_);
    shutdown_ = true;
  }
  has_job_.notify_all();
  {
    // No thread starts or leaves on idle after shutdown_ is set: these are all there will be.
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [id, t] : threads_) all.push_back(std::move(t));
    for (std::thread& t : exited_) all.push_back(std::move(t));
    threads_.clear();
    exited_.clear();
  }
  for (std::thread& t : all)
    if (t.joinable()) t.join();
  std::lock_guard<std::mutex> lock(mu_);
  set_live_locked();
}

size_t WorkerPool::live_threads() const {
  std::lock_guard<std::mutex> lock(mu_);
  return threads_.size();
}

}  // namespace tq
