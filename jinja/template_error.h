// The interpreter's internal error. It carries the template line once known; jinja::render turns
// it into tq::Error("chat template line N: ...") at the API boundary.
#pragma once
#include <fmt/format.h>

#include <cstddef>
#include <stdexcept>
#include <string>
#include <utility>

namespace tq::jinja {

class TemplateError : public std::runtime_error {
 public:
  explicit TemplateError(const std::string& message, int line = 0)
      : std::runtime_error(message), line_(line) {}

  int line() const { return line_; }
  // Errors raised deep inside value operations do not know their line: the innermost template
  // node that sees the error stamps it, outer nodes leave it alone.
  void set_line_if_unknown(int line) {
    if (line_ == 0) line_ = line;
  }

 private:
  int line_;
};

template <typename... Args>
[[noreturn]] void raise_error(fmt::format_string<Args...> format, Args&&... args) {
  throw TemplateError(fmt::format(format, std::forward<Args>(args)...));
}

// Python builds strings and lists of any size. A prompt never needs more than these, and a template
// that doubles a string or list in a loop would otherwise exhaust memory (found by fuzz_chat_template).
constexpr size_t kMaxStringBytes = size_t{1} << 26;
constexpr size_t kMaxSequenceItems = size_t{1} << 22;

// Raises a MemoryError before `what` grows past kMaxStringBytes.
inline void check_string_size(size_t bytes, const char* what) {
  if (bytes > kMaxStringBytes) raise_error("MemoryError: {} would be larger than {} bytes", what, kMaxStringBytes);
}

// Raises a MemoryError before `what` grows past kMaxSequenceItems.
inline void check_sequence_size(size_t items, const char* what) {
  if (items > kMaxSequenceItems) raise_error("MemoryError: {} would hold more than {} items", what, kMaxSequenceItems);
}

template <typename... Args>
[[noreturn]] void raise_error_at(int line, fmt::format_string<Args...> format, Args&&... args) {
  throw TemplateError(fmt::format(format, std::forward<Args>(args)...), line);
}

}  // namespace tq::jinja
