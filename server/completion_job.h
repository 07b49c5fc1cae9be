// One HTTP completion request in flight: its engine requests (one per choice), the outputs
// they deliver (on the engine thread) queued for the HTTP thread, the latency metrics they
// produce, and the abort of whatever has not finished when the client goes away.
#pragma once
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "engine/async_engine.h"
#include "server/metrics.h"
#include "server/openai_request.h"

namespace tq {

class CompletionJob : public std::enable_shared_from_this<CompletionJob> {
 public:
  CompletionJob(AsyncEngine& engine, ServerMetrics& metrics, ApiRequest request);
  const ApiRequest& request() const { return request_; }
  // Submits every choice's engine request. Call once, on a shared_ptr.
  void start();
  // Waits up to `timeout` for outputs; returns those that arrived as (choice, output).
  std::vector<std::pair<int, RequestOutput>> wait(std::chrono::milliseconds timeout);
  bool all_finished() const;
  // Aborts every choice that has not finished (client gone). Idempotent.
  void abort_unfinished();

 private:
  struct ChoiceTiming {
    std::chrono::steady_clock::time_point last;
    bool any_token = false;
    bool finished = false;
    uint64_t engine_id = 0;
  };
  void on_output(int choice, const RequestOutput& out);

  AsyncEngine& engine_;
  ServerMetrics& metrics_;
  const ApiRequest request_;
  std::chrono::steady_clock::time_point arrival_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<int, RequestOutput>> queue_;
  std::vector<ChoiceTiming> choices_;
  int unfinished_ = 0;
  bool aborted_ = false;
};

}  // namespace tq
