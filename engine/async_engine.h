// Runs an EngineCore on its own thread for the server: HTTP threads submit requests and aborts
// (thread-safe), the engine thread steps while there is work and sleeps otherwise (no spinning),
// and each request's outputs go to its callback, on the engine thread, in order. A callback
// must be quick: it hands the output to the waiting HTTP thread.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/engine_core.h"

namespace tq {

class AsyncEngine {
 public:
  using OutputCallback = std::function<void(const RequestOutput&)>;
  // Gets the prefix cache's changes after each step that had any, on the engine thread, in order
  // (EngineConfig::kv_events); must be quick.
  using KvEventListener = std::function<void(std::vector<KvCacheEvent>)>;

  explicit AsyncEngine(EngineCore& core, KvEventListener on_kv_events = {});
  ~AsyncEngine();  // stop()
  AsyncEngine(const AsyncEngine&) = delete;
  AsyncEngine& operator=(const AsyncEngine&) = delete;

  // Queues a request. A request the engine rejects (EngineCore::add_request) gets one output
  // with finish == error and the message. Every request gets exactly one finishing output.
  void submit(std::unique_ptr<Request> request, OutputCallback on_output);
  // Ends a request (its blocks are freed in the engine's next iteration); its callback gets a
  // finishing output with finish == abort unless it already finished.
  void abort(uint64_t id);

  // A fresh id for a request.
  uint64_t next_id() { return next_id_.fetch_add(1); }
  // Counters as of the last step. Whenever the engine falls idle (no request left) it checks
  // the block pool and prefix cache (EngineCore::check_consistency); the counts of checks and
  // failures are in consistency_checks / consistency_failures (a failure is logged to stderr).
  EngineStats stats() const;
  // Requests submitted and not yet finished.
  int num_unfinished() const;
  // Waits until every submitted request has finished.
  void wait_idle();
  // Ends every unfinished request (abort) and joins the thread.
  void stop();

 private:
  void loop();

  EngineCore& core_;
  KvEventListener on_kv_events_;
  mutable std::mutex mu_;
  std::condition_variable wake_, idle_;
  std::vector<std::pair<std::unique_ptr<Request>, OutputCallback>> inbox_;
  std::vector<uint64_t> aborts_;
  std::unordered_map<uint64_t, OutputCallback> callbacks_;  // engine thread only
  int unfinished_ = 0;
  bool stopping_ = false;
  EngineStats stats_;
  uint64_t consistency_checks_ = 0, consistency_failures_ = 0;  // engine thread only
  std::chrono::steady_clock::time_point last_trim_{};             // engine thread only
  bool trim_owed_ = false;                                        // engine thread only
  static constexpr std::chrono::seconds kTrimInterval{1};
  std::atomic<uint64_t> next_id_{1};
  std::thread thread_;
};

}  // namespace tq
