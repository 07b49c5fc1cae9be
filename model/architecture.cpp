#include "model/architecture.h"

namespace tq {

std::span<const ArchitectureSpec* const> architectures() {
  static const ArchitectureSpec* const kAll[] = {&kLlamaArchitecture, &kQwen2Architecture, &kQwen3Architecture};
  return kAll;
}

}  // namespace tq
