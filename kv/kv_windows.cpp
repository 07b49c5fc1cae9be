#include "kv/kv_windows.h"

#include <fmt/format.h>

namespace tq {

std::string KvWindows::describe() const {
  if (!any()) return "none";
  std::string out = fmt::format("sink {}, recent {}", sink_tokens, recent_tokens);
  if (coded_from > 0 || coded_to < INT_MAX || coded_last > 0) {
    out += ", coded only";
    if (coded_from > 0 || coded_to < INT_MAX)
      out += coded_to < INT_MAX ? fmt::format(" in [{}, {})", coded_from, coded_to) : fmt::format(" from {}", coded_from);
    if (coded_last > 0) out += fmt::format(" in the last {}", coded_last);
  }
  if (dtype != KvDtype::F16) out += fmt::format(", {}", kv_dtype_name(dtype));
  return out;
}

}  // namespace tq
