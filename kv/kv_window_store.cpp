#include "kv/kv_window_store.h"

#include <algorithm>

#include "errors/error.h"

namespace tq {

int window_blocks_for_serving(int sink_tokens, int recent_tokens, int block_size, int max_num_seqs,
                              int max_num_batched_tokens, int num_data_blocks) {
  const auto blocks = [block_size](int64_t tokens) { return (tokens + block_size - 1) / block_size; };
  const int64_t per_seq = blocks(sink_tokens) + blocks(recent_tokens) + 2;
  const int64_t running = int64_t(max_num_seqs) * per_seq + blocks(max_num_batched_tokens);
  return static_cast<int>(std::min<int64_t>(running, num_data_blocks));
}

KvWindowStore::KvWindowStore(int num_data_blocks, int num_window_blocks)
    : num_window_blocks_(num_window_blocks),
      window_of_(std::max(num_data_blocks, 0), -1),
      users_(window_of_.size(), 0),
      in_unused_(window_of_.size()),
      listed_(window_of_.size(), 0) {
  if (num_data_blocks <= 0 || num_window_blocks <= 0)
    fail("KV window store needs positive data and window block counts (got {} and {})", num_data_blocks,
         num_window_blocks);
  for (int w = num_window_blocks - 1; w >= 0; --w) free_.push_back(w);
}

bool KvWindowStore::attach(int block) {
  if (window_of_.at(block) < 0) {
    if (!free_.empty()) {
      window_of_[block] = free_.back();
      free_.pop_back();
    } else if (!unused_.empty()) {
      const int donor = unused_.front();
      unused_.pop_front();
      listed_[donor] = 0;
      window_of_[block] = window_of_[donor];
      window_of_[donor] = -1;
    } else {
      return false;
    }
  }
  add_user(block);
  return true;
}

void KvWindowStore::add_user(int block) {
  if (window_of_.at(block) < 0) fail("KV window store: data block {} has no window block to use", block);
  if (listed_[block]) {
    unused_.erase(in_unused_[block]);
    listed_[block] = 0;
  }
  ++users_[block];
}

void KvWindowStore::drop_user(int block) {
  if (users_.at(block) <= 0) fail("KV window store: data block {} has no window user to drop", block);
  if (--users_[block] == 0) {
    in_unused_[block] = unused_.insert(unused_.end(), block);
    listed_[block] = 1;
  }
}

void KvWindowStore::check_consistency(const std::vector<int>& expected_users) const {
  if (expected_users.size() != users_.size()) fail("KV window store: {} user counts for {} blocks", expected_users.size(), users_.size());
  std::vector<int> owners(num_window_blocks_, 0);
  for (int32_t w : free_) ++owners.at(w);
  size_t listed = 0;
  for (size_t b = 0; b < users_.size(); ++b) {
    if (users_[b] != expected_users[b])
      fail("KV window store: data block {} has {} window users, the tables' windows cover it {} times", b, users_[b],
           expected_users[b]);
    if (window_of_[b] >= 0) ++owners.at(window_of_[b]);
    if (users_[b] > 0 && window_of_[b] < 0) fail("KV window store: data block {} has users but no window", b);
    if (listed_[b] != (window_of_[b] >= 0 && users_[b] == 0))
      fail("KV window store: data block {} is {}listed as unused", b, listed_[b] ? "" : "not ");
    listed += listed_[b];
  }
  if (listed != unused_.size()) fail("KV window store: the unused list holds {} blocks, {} are marked", unused_.size(), listed);
  for (int w = 0; w < num_window_blocks_; ++w)
    if (owners[w] != 1) fail("KV window store: window block {} is attached or free {} times", w, owners[w]);
}

}  // namespace tq
