// Caps how much memory a test may take, so that a reader trusting a claimed count of 2^60 fails
// the test instead of swapping the machine.
//
// Normal builds cap the address space (RLIMIT_AS): an allocation over the cap throws
// std::bad_alloc, as it would on a machine that is out of memory. AddressSanitizer builds cannot:
// ASan reserves terabytes of shadow address space at start-up and dies under such a limit. There
// the cap is on ASan's live heap instead, checked by its malloc hook, and going over it ends the
// process with a message naming the cap (ASan has no way to make one allocation fail with
// bad_alloc, so tests that need that failure are skipped under ASan, saying so).
#pragma once

#include <cstdint>

namespace tq::test {

// GCC says __SANITIZE_ADDRESS__, clang __has_feature(address_sanitizer).
#if defined(__SANITIZE_ADDRESS__)
#define TQ_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TQ_TEST_ASAN 1
#endif
#endif

#ifdef TQ_TEST_ASAN
inline constexpr bool kUnderAddressSanitizer = true;
#else
inline constexpr bool kUnderAddressSanitizer = false;
#endif

// Sets the cap to `bytes` (address space, or live heap under ASan); returns false when the
// kernel refuses the limit. restore_memory_cap() lifts it again.
bool set_memory_cap(uint64_t bytes);
void restore_memory_cap();

// What this process uses now, in the unit the cap counts: mapped address space, or ASan's live
// heap bytes.
uint64_t memory_in_use();

}  // namespace tq::test
