#include "kernels/cuda/cuda_status.h"

#include "errors/error.h"

namespace tq::cuda {

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) fail("{}: {} ({})", what, cudaGetErrorString(status), cudaGetErrorName(status));
}

void check_launch(const char* kernel) { check(cudaGetLastError(), kernel); }

void fail_with(const std::string& message) { fail("{}", message); }

int device_count(std::string* why) {
  int n = 0;
  const cudaError_t status = cudaGetDeviceCount(&n);
  if (status != cudaSuccess) {
    if (why) *why = cudaGetErrorString(status);
    cudaGetLastError();  // the runtime keeps a sticky copy of some errors; this one is expected
    return 0;
  }
  if (n == 0 && why) *why = "the CUDA runtime sees no device";
  return n;
}

std::string describe_device(int device) {
  cudaDeviceProp p{};
  check(cudaGetDeviceProperties(&p, device), "cudaGetDeviceProperties");
  return fmt::format("{} (sm_{}{}, {} SMs, {:.1f} GiB)", p.name, p.major, p.minor, p.multiProcessorCount,
                     double(p.totalGlobalMem) / double(1ull << 30));
}

}  // namespace tq::cuda
