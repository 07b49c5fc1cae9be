#include "io/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "errors/error.h"

namespace tq {
namespace {

// Closes the descriptor on every path out of the constructor; the mapping outlives it.
struct FdCloser {
  int fd;
  ~FdCloser() { ::close(fd); }
};

}  // namespace

MappedFile::MappedFile(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("{}: cannot open: {}", path, std::strerror(errno));
  FdCloser closer{fd};

  struct stat st {};
  if (::fstat(fd, &st) != 0) fail("{}: cannot stat: {}", path, std::strerror(errno));
  if (S_ISDIR(st.st_mode)) fail("{}: is a directory, expected a file", path);
  if (!S_ISREG(st.st_mode)) fail("{}: not a regular file", path);

  size_ = static_cast<size_t>(st.st_size);
  if (size_ == 0) return;  // mmap of length 0 is an error; an empty file is simply empty

  void* mapping = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
  if (mapping == MAP_FAILED) {
    const int err = errno;
    size_ = 0;
    fail("{}: cannot mmap {} bytes: {}", path, static_cast<size_t>(st.st_size),
         std::strerror(err));
  }
  data_ = static_cast<const uint8_t*>(mapping);
}

void release_mapped_pages(const uint8_t* begin, size_t bytes) {
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t first = (reinterpret_cast<uintptr_t>(begin) + page - 1) / page * page;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(begin) + bytes) / page * page;
  if (end > first) ::madvise(reinterpret_cast<void*>(first), end - first, MADV_DONTNEED);
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
}

}  // namespace tq
