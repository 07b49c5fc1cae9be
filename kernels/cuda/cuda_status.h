// Errors of the CUDA runtime and of cuBLAS as tq::Error naming the call that failed, and what the
// machine offers: the only place the backend asks the driver whether a GPU is there.
#pragma once
#include <cuda_runtime.h>

#include <string>

namespace tq::cuda {

// Throws tq::Error "<what>: <CUDA's message>" unless status is cudaSuccess.
void check(cudaError_t status, const char* what);
// After a kernel launch: the launch's own error (bad configuration), as check().
void check_launch(const char* kernel);

// Throws tq::Error with `message` (for .cu files, whose compiler cannot check fmt's format strings).
[[noreturn]] void fail_with(const std::string& message);

// Number of CUDA devices this process can use: 0 when there is no driver or no GPU, with `why`
// (when given) set to the runtime's reason.
int device_count(std::string* why = nullptr);
// "NVIDIA H200 (sm_90, 132 SMs, 139.8 GiB)"
std::string describe_device(int device);

}  // namespace tq::cuda
