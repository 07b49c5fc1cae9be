// Read-only memory map of a whole file (RAII). Empty files map to size 0, data nullptr.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace tq {

class MappedFile {
 public:
  explicit MappedFile(const std::string& path);  // throws tq::Error naming the path
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// Drops the whole pages inside [begin, begin + bytes) of a MappedFile's mapping from this process's
// memory once their contents have been copied out (the weights a loader converts or regroups): the
// mapping stays valid and a later read faults a page in from the file again, so a loaded model's
// RSS is what it keeps, not that plus the file. A hint: failures are ignored.
void release_mapped_pages(const uint8_t* begin, size_t bytes);

}  // namespace tq
