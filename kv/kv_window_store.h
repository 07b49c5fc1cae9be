// Which data blocks of a KV cache have a window block: the block of full-precision (window-dtype)
// copies of their rows that the windows of kv/kv_windows.h read. Window blocks are fewer than
// data blocks: a data block needs one only while some sequence's sink or recent window covers it.
//
// Each data block counts its users: the sequences whose windows cover it now. A window block
// whose data block has no user stays attached (its rows still serve a later prefix-cache hit
// that needs them) until a new data block needs a window block and none is free: then the one
// left unused longest is taken. A hit checks that the windows it needs are still attached
// (kv/block_pool.h), so a query always reads the full-precision rows it would have read
// computing everything itself.
//
// Single-threaded: changed between forward passes only.
#pragma once
#include <cstdint>
#include <list>
#include <vector>

namespace tq {

// Window blocks a serving engine needs so that running sequences never lack one: each of
// max_num_seqs sequences covers its sink blocks and its recent window plus a block at each end,
// and a step's new tokens (at most max_num_batched_tokens) add their blocks. At most
// num_data_blocks (a sequence's windows cover only blocks it holds). Blocks unused at a moment
// keep their windows for prefix-cache hits until a new block needs them.
int window_blocks_for_serving(int sink_tokens, int recent_tokens, int block_size, int max_num_seqs,
                              int max_num_batched_tokens, int num_data_blocks);

class KvWindowStore {
 public:
  KvWindowStore(int num_data_blocks, int num_window_blocks);

  int num_window_blocks() const { return num_window_blocks_; }
  // Window block of each data block, -1 when none: [num_data_blocks] (the attention kernel's map).
  const int32_t* window_of() const { return window_of_.data(); }
  bool has_window(int block) const { return window_of_.at(block) >= 0; }
  int users(int block) const { return users_.at(block); }
  // Window blocks free or attached without users: how many attach() can still give.
  int num_available() const { return static_cast<int>(free_.size() + unused_.size()); }

  // Gives `block` a window block and one user. It keeps its window block when it has one, else
  // gets a free one, else takes the longest-unused one's. False (nothing changed) when every
  // window block has users.
  bool attach(int block);
  void add_user(int block);  // the block must have a window
  void drop_user(int block);

  // Throws tq::Error unless every window block is attached once or free, and each data block's
  // users equal `expected_users` (what the tables' windows cover) with a window wherever > 0.
  void check_consistency(const std::vector<int>& expected_users) const;

 private:
  int num_window_blocks_;
  std::vector<int32_t> window_of_;  // [data block]
  std::vector<int> users_;          // [data block]
  std::vector<int32_t> free_;       // window blocks attached to nothing
  std::list<int> unused_;           // data blocks with a window and no user; front: unused longest
  std::vector<std::list<int>::iterator> in_unused_;  // [data block], valid when listed
  std::vector<uint8_t> listed_;                       // [data block]
};

}  // namespace tq
