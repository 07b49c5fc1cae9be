#include "memory/huge_pages.h"

#include <sys/mman.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

namespace tq {
namespace {

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kMapLargeBuffers = false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kMapLargeBuffers = false;
#else
constexpr bool kMapLargeBuffers = true;
#endif
#else
constexpr bool kMapLargeBuffers = true;
#endif

bool mapped(size_t bytes) { return kMapLargeBuffers && bytes >= kHugePageBytes; }
size_t round_up(size_t bytes) { return (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes; }

}  // namespace

bool large_buffers_mapped() { return kMapLargeBuffers; }

void* huge_page_allocate(size_t bytes) {
  if (!mapped(bytes)) return std::calloc(1, bytes > 0 ? bytes : 1);
  // Over-map by one huge page and keep the aligned part: the kernel gives huge pages only to
  // 2 MiB-aligned ranges. The advice comes before the first touch, which is what allocates them.
  const size_t size = round_up(bytes);
  if (size < bytes || size + kHugePageBytes < size) return nullptr;
  void* raw = ::mmap(nullptr, size + kHugePageBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const uintptr_t begin = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (begin + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  if (aligned > begin) ::munmap(raw, aligned - begin);
  const uintptr_t end = begin + size + kHugePageBytes;
  if (end > aligned + size) ::munmap(reinterpret_cast<void*>(aligned + size), end - (aligned + size));
  // Only whole huge pages are advised: a last, partial one stays in 4 KiB pages rather than
  // committing 2 MiB for a few bytes. THP "never": all of it stays in 4 KiB pages.
  ::madvise(reinterpret_cast<void*>(aligned), bytes / kHugePageBytes * kHugePageBytes, MADV_HUGEPAGE);
  return reinterpret_cast<void*>(aligned);
}

void huge_page_free(void* p, size_t bytes) {
  if (!p) return;
  if (!mapped(bytes)) return std::free(p);
  ::munmap(p, round_up(bytes));
}

bool advised_for_huge_pages(const void* p, size_t bytes) {
  std::ifstream smaps("/proc/self/smaps");
  const uintptr_t first = reinterpret_cast<uintptr_t>(p), last = first + bytes;
  bool inside = false, any = false;
  std::string line;
  while (std::getline(smaps, line)) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2) {  // a mapping's first line
      inside = lo < last && first < hi;
      continue;
    }
    if (inside && line.rfind("VmFlags:", 0) == 0) {
      if ((line + " ").find(" hg ") == std::string::npos) return false;
      any = true;
    }
  }
  return any;
}

}  // namespace tq
