#include "server/completion_job.h"

#include <algorithm>

namespace tq {

CompletionJob::CompletionJob(AsyncEngine& engine, ServerMetrics& metrics, ApiRequest request)
    : engine_(engine), metrics_(metrics), request_(std::move(request)), arrival_(std::chrono::steady_clock::now()) {
  choices_.resize(request_.prompts.size() * request_.candidates_per_prompt());
  unfinished_ = static_cast<int>(choices_.size());
}

void CompletionJob::start() {
  std::vector<std::unique_ptr<Request>> requests;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t c = 0; c < choices_.size(); ++c) {
      SamplingParams params = request_.params;
      const int per_prompt = request_.candidates_per_prompt();
      // n > 1 with a seed: each choice its own reproducible stream.
      if (params.seed && per_prompt > 1) params.seed = *params.seed + c % per_prompt;
      const int prompt_logprobs = request_.echo && request_.logprobs >= 0 ? request_.logprobs : -1;
      if (request_.logprobs >= 0) params.logprobs = request_.logprobs;
      // best_of ranks candidates by the log-probability of their tokens.
      if (request_.best_of > request_.n) params.logprobs = std::max(params.logprobs, 0);
      choices_[c].engine_id = engine_.next_id();
      choices_[c].last = arrival_;
      requests.push_back(std::make_unique<Request>(choices_[c].engine_id, request_.prompts[c / per_prompt], params,
                                                   prompt_logprobs));
    }
  }
  std::weak_ptr<CompletionJob> weak = shared_from_this();
  for (size_t c = 0; c < requests.size(); ++c) {
    // The job may be gone (client left) by the time the engine reports; then only the way the
    // request ended is counted.
    engine_.submit(std::move(requests[c]), [weak, c, metrics = &metrics_](const RequestOutput& out) {
      if (auto job = weak.lock()) {
        job->on_output(static_cast<int>(c), out);
      } else if (out.finish != FinishReason::none) {
        metrics->count_finished(finish_reason_name(out.finish));
      }
    });
  }
}

void CompletionJob::on_output(int choice, const RequestOutput& out) {
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> lock(mu_);
  ChoiceTiming& t = choices_[choice];
  if (!out.new_ids.empty()) {
    const double since = std::chrono::duration<double>(now - t.last).count();
    if (!t.any_token) {
      metrics_.observe_ttft(since);
    } else {
      metrics_.observe_itl(since / double(out.new_ids.size()));
    }
    t.any_token = true;
    t.last = now;
  }
  if (out.finish != FinishReason::none && !t.finished) {
    t.finished = true;
    --unfinished_;
    metrics_.observe_e2e(std::chrono::duration<double>(now - arrival_).count());
    metrics_.count_finished(finish_reason_name(out.finish));
  }
  queue_.emplace_back(choice, out);
  cv_.notify_all();
}

std::vector<std::pair<int, RequestOutput>> CompletionJob::wait(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return !queue_.empty(); });
  std::vector<std::pair<int, RequestOutput>> out(std::make_move_iterator(queue_.begin()),
                                                 std::make_move_iterator(queue_.end()));
  queue_.clear();
  return out;
}

bool CompletionJob::all_finished() const {
  std::lock_guard<std::mutex> lock(mu_);
  return unfinished_ == 0 && queue_.empty();
}

void CompletionJob::abort_unfinished() {
  std::vector<uint64_t> ids;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (aborted_) return;
    aborted_ = true;
    for (const ChoiceTiming& t : choices_)
      if (!t.finished) ids.push_back(t.engine_id);
  }
  for (uint64_t id : ids) engine_.abort(id);
}

}  // namespace tq
