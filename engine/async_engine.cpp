#include "engine/async_engine.h"

#include <chrono>
#include <cstdio>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "errors/error.h"

namespace tq {

AsyncEngine::AsyncEngine(EngineCore& core, KvEventListener on_kv_events)
    : core_(core), on_kv_events_(std::move(on_kv_events)), stats_(core.stats()), thread_([this] { loop(); }) {}

AsyncEngine::~AsyncEngine() { stop(); }

void AsyncEngine::submit(std::unique_ptr<Request> request, OutputCallback on_output) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_) {
    RequestOutput out;
    out.id = request->id;
    out.finish = FinishReason::error;
    out.error = "the server is shutting down";
    on_output(out);
    return;
  }
  ++unfinished_;
  inbox_.emplace_back(std::move(request), std::move(on_output));
  wake_.notify_one();
}

void AsyncEngine::abort(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  aborts_.push_back(id);
  wake_.notify_one();
}

EngineStats AsyncEngine::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

int AsyncEngine::num_unfinished() const {
  std::lock_guard<std::mutex> lock(mu_);
  return unfinished_;
}

void AsyncEngine::wait_idle() {
  std::unique_lock<std::mutex> lock(mu_);
  idle_.wait(lock, [&] { return unfinished_ == 0; });
}

void AsyncEngine::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
    wake_.notify_one();
  }
  if (thread_.joinable()) thread_.join();
}

void AsyncEngine::loop() {
  for (;;) {
    std::vector<std::pair<std::unique_ptr<Request>, OutputCallback>> inbox;
    std::vector<uint64_t> aborts;
    bool stopping;
    {
      std::unique_lock<std::mutex> lock(mu_);
      const auto has_input = [&] { return stopping_ || !inbox_.empty() || !aborts_.empty() || core_.has_work(); };
#if defined(__GLIBC__)
      if (trim_owed_ && !wake_.wait_until(lock, last_trim_ + kTrimInterval, has_input)) {
        // Idle for the rest of the interval since the last trim: pay the one owed.
        lock.unlock();
        trim_owed_ = false;
        malloc_trim(0);
        last_trim_ = std::chrono::steady_clock::now();
        continue;
      }
#endif
      wake_.wait(lock, has_input);
      inbox.swap(inbox_);
      aborts.swap(aborts_);
      stopping = stopping_;
    }
    int finished = 0;
    const auto deliver = [&](const RequestOutput& out) {
      auto it = callbacks_.find(out.id);
      if (it == callbacks_.end()) return;
      it->second(out);
      if (out.finish != FinishReason::none) {
        callbacks_.erase(it);
        ++finished;
      }
    };
    const auto end_request = [&](uint64_t id, FinishReason reason, const std::string& message) {
      RequestOutput out;
      out.id = id;
      out.finish = reason;
      out.error = message;
      deliver(out);
    };
    for (auto& [request, callback] : inbox) {
      const uint64_t id = request->id;
      callbacks_[id] = std::move(callback);
      try {
        core_.add_request(std::move(request));
      } catch (const Error& e) {
        end_request(id, FinishReason::error, e.what());
      }
    }
    if (stopping) {
      for (auto& [id, cb] : std::unordered_map<uint64_t, OutputCallback>(callbacks_)) aborts.push_back(id);
    }
    for (uint64_t id : aborts)
      if (core_.abort_request(id)) end_request(id, FinishReason::abort, "aborted");
    const bool busy = !inbox.empty() || !aborts.empty() || core_.has_work();
    if (core_.has_work()) {
      try {
        for (const RequestOutput& out : core_.step()) deliver(out);
      } catch (const std::exception& e) {
        // A failed step leaves no request in a known state: end them all with the reason.
        std::fprintf(stderr, "engine step failed: %s\n", e.what());
        for (auto& [id, cb] : std::unordered_map<uint64_t, OutputCallback>(callbacks_)) {
          core_.abort_request(id);
          end_request(id, FinishReason::error, std::string("engine error: ") + e.what());
        }
      }
    }
    if (on_kv_events_) {
      std::vector<KvCacheEvent> events = core_.take_kv_events();
      if (!events.empty()) on_kv_events_(std::move(events));
    }
    if (busy && !core_.has_work()) {
      // Idle now: with no request left every block must be free and the prefix cache sound.
      ++consistency_checks_;
      try {
        core_.check_consistency();
      } catch (const std::exception& e) {
        ++consistency_failures_;
        std::fprintf(stderr, "engine consistency check failed: %s\n", e.what());
      }
#if defined(__GLIBC__)
      // glibc keeps what a burst of requests freed in its arenas (one per thread, up to 8 per
      // core): give it back to the system, at most once a second, so the idle server's RSS is
      // what it holds, not its past peak (scripts/soak.py checks that RSS stays flat). Idle again
      // within the second, the engine owes a trim and pays it once the second is up, if it is
      // still idle then: otherwise what the last burst freed stayed resident until the next.
      const auto now = std::chrono::steady_clock::now();
      if (now - last_trim_ >= kTrimInterval) {
        malloc_trim(0);
        last_trim_ = now;
        trim_owed_ = false;
      } else {
        trim_owed_ = true;
      }
#endif
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      unfinished_ -= finished;
      stats_ = core_.stats();
      stats_.consistency_checks = consistency_checks_;
      stats_.consistency_failures = consistency_failures_;
      if (unfinished_ == 0) idle_.notify_all();
      if (stopping && !core_.has_work() && inbox_.empty()) return;
    }
  }
}

}  // namespace tq
