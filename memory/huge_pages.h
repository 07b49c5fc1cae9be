// Memory for the engine's large, long-lived buffers (the KV arenas, the stored weights), backed by
// transparent huge pages where the kernel offers them (THP "always" or "madvise"): decode reads
// every weight and, at long contexts, KV rows scattered over the arena block by block; with 4 KiB
// pages most of those reads first wait for a page walk. Measured: SmolLM2 tq4 decode at 8000
// positions 2-14 % faster in three A/B runs (docs/BENCHMARKS.md).
#pragma once
#include <cstddef>
#include <cstdint>
#include <new>
#include <vector>

namespace tq {

// Buffers from this size on are mapped on their own, aligned to huge pages and advised for them
// (all but a last partial one); smaller ones come from malloc.
constexpr size_t kHugePageBytes = size_t(2) << 20;

// `bytes` of zeroed memory (nullptr when it cannot be had), freed by huge_page_free with the same
// size. Under AddressSanitizer every size comes from malloc, so its
// checks cover these buffers as any other.
void* huge_page_allocate(size_t bytes);
void huge_page_free(void* p, size_t bytes);
// Whether buffers of kHugePageBytes or more are mapped and advised (false under AddressSanitizer).
bool large_buffers_mapped();

// Whether every mapping the range touches is advised for huge pages (the "hg" flag in
// /proc/self/smaps). Whether the kernel then grants them depends on its THP settings and free
// memory; /proc/self/smaps' AnonHugePages says what it did.
bool advised_for_huge_pages(const void* p, size_t bytes);

// A standard allocator over huge_page_allocate, for containers of large buffers.
template <class T>
struct HugePageAllocator {
  static_assert(alignof(T) <= alignof(std::max_align_t), "malloc's alignment serves small buffers");
  using value_type = T;
  HugePageAllocator() = default;
  template <class U>
  HugePageAllocator(const HugePageAllocator<U>&) {}
  T* allocate(size_t n) {
    if (n > size_t(-1) / sizeof(T)) throw std::bad_array_new_length();
    void* p = huge_page_allocate(n * sizeof(T));
    if (!p && n > 0) throw std::bad_alloc();
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t n) { huge_page_free(p, n * sizeof(T)); }
  template <class U>
  bool operator==(const HugePageAllocator<U>&) const { return true; }
};

// Bytes of a large buffer (a stored weight matrix).
using LargeBytes = std::vector<uint8_t, HugePageAllocator<uint8_t>>;
// Floats of a large buffer (a batch's activations: a 2048-token step's products write 80 MB rows
// 64 bytes at a time per group of weight rows, a page walk each with 4 KiB pages).
using LargeFloats = std::vector<float, HugePageAllocator<float>>;

}  // namespace tq
