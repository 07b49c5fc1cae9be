#include "engine/scheduler.h"

#include <algorithm>

#include "errors/error.h"

namespace tq {

Scheduler::Scheduler(const SchedulerConfig& config, BlockPool& pool) : config_(config), pool_(pool) {
  if (config.max_num_batched_tokens < 1)
    fail("--max-num-batched-tokens must be at least 1 (got {})", config.max_num_batched_tokens);
  if (config.max_num_seqs < 1) fail("--max-num-seqs must be at least 1 (got {})", config.max_num_seqs);
}

void Scheduler::add(Request* request) {
  request->status = RequestStatus::waiting;
  waiting_.push_back(request);
}

int Scheduler::tokens_to_compute(const Request& r, int budget) {
  return std::min(r.num_tokens() - r.num_computed, budget);
}

void Scheduler::preempt(Request* request) {
  pool_.free(request->table, request->hashes);
  request->num_computed = 0;
  request->status = RequestStatus::waiting;
  ++request->num_preemptions;
  waiting_.push_front(request);
}

SchedulerOutput Scheduler::schedule() {
  SchedulerOutput out;
  int budget = config_.max_num_batched_tokens;

  // Running requests, oldest first; the newest give way when blocks run out.
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Request* r = running_[i];
    const int n = tokens_to_compute(*r, budget);
    if (n <= 0) {  // nothing to compute (cannot happen while running; keep the loop safe)
      ++i;
      continue;
    }
    bool fits = pool_.allocate(r->table, r->num_computed + n);
    while (!fits) {
      Request* victim = running_.back();
      running_.pop_back();
      preempt(victim);
      out.preempted.push_back(victim);
      if (victim == r) break;
      fits = pool_.allocate(r->table, r->num_computed + n);
    }
    if (!fits) break;  // r itself was preempted: everything after it is gone too
    out.chunks.push_back({r, n});
    out.total_tokens += n;
    budget -= n;
    ++i;
  }

  // Waiting requests, first come first served, unless this step had to preempt.
  while (out.preempted.empty() && !waiting_.empty() && budget > 0 &&
         static_cast<int>(running_.size()) < config_.max_num_seqs) {
    Request* r = waiting_.front();
    if (r->num_computed == 0 && r->table.blocks.empty() && r->prompt_logprobs < 0) {
      // Prompt logprobs need every prompt position's logits, so such requests compute it all.
      // The hit counters count a request's first lookup only.
      r->num_computed = pool_.acquire_cached_prefix(r->tokens, r->table, r->hashes, !r->prefix_lookup_counted);
      if (!r->prefix_lookup_counted) r->num_cached_tokens = r->num_computed;
      r->prefix_lookup_counted = true;
    }
    const int n = tokens_to_compute(*r, budget);
    if (!pool_.allocate(r->table, r->num_computed + n)) {
      pool_.free(r->table, r->hashes);  // give the shared prefix back; try again next step
      r->num_computed = 0;
      break;
    }
    waiting_.pop_front();
    r->status = RequestStatus::running;
    running_.push_back(r);
    out.chunks.push_back({r, n});
    out.total_tokens += n;
    budget -= n;
  }
  return out;
}

void Scheduler::remove(Request* request) {
  running_.erase(std::remove(running_.begin(), running_.end(), request), running_.end());
  waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), request), waiting_.end());
  pool_.free(request->table, request->hashes);
}

std::vector<const BlockTable*> Scheduler::tables() const {
  std::vector<const BlockTable*> out;
  for (const Request* r : running_) out.push_back(&r->table);
  for (const Request* r : waiting_)
    if (!r->table.blocks.empty()) out.push_back(&r->table);
  return out;
}

}  // namespace tq
