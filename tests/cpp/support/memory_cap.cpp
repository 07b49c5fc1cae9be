#include "memory_cap.h"

#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdio>
#include <fstream>

namespace tq::test {

#ifdef TQ_TEST_ASAN
namespace {
std::atomic<uint64_t> g_heap_cap{UINT64_MAX};
}  // namespace
}  // namespace tq::test

// Declared by hand: GCC ships the sanitizer runtime without <sanitizer/allocator_interface.h>.
extern "C" size_t __sanitizer_get_current_allocated_bytes();

// ASan calls this weak hook after every allocation.
extern "C" void __sanitizer_malloc_hook(const volatile void*, size_t) {
  const uint64_t cap = tq::test::g_heap_cap.load(std::memory_order_relaxed);
  if (cap == UINT64_MAX || __sanitizer_get_current_allocated_bytes() <= cap) return;
  char message[160];
  const int n = std::snprintf(message, sizeof message,
                              "memory_cap: the live heap went over the test's cap of %llu bytes\n",
                              static_cast<unsigned long long>(cap));
  if (n > 0) (void)!::write(2, message, static_cast<size_t>(n));
  ::_exit(86);
}

namespace tq::test {

bool set_memory_cap(uint64_t bytes) {
  g_heap_cap.store(bytes);
  return true;
}
void restore_memory_cap() { g_heap_cap.store(UINT64_MAX); }
uint64_t memory_in_use() { return __sanitizer_get_current_allocated_bytes(); }

#else

namespace {
rlimit g_saved{RLIM_INFINITY, RLIM_INFINITY};
bool g_set = false;
}  // namespace

bool set_memory_cap(uint64_t bytes) {
  rlimit current{};
  if (::getrlimit(RLIMIT_AS, &current) != 0) return false;
  if (!g_set) g_saved = current;
  rlimit limit = current;
  limit.rlim_cur = bytes < current.rlim_max ? bytes : current.rlim_max;
  if (::setrlimit(RLIMIT_AS, &limit) != 0) return false;
  g_set = true;
  return true;
}

void restore_memory_cap() {
  if (g_set) ::setrlimit(RLIMIT_AS, &g_saved);
  g_set = false;
}

uint64_t memory_in_use() {
  std::ifstream statm("/proc/self/statm");
  uint64_t pages = 0;
  statm >> pages;
  return pages * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
}

#endif

}  // namespace tq::test
