// The decoder forward pass on an NVIDIA GPU (kernels/cuda): the same layer sequence as the CPU's
// (model/layer_blocks.h) for every family in model/architecture.h, with the weights and the
// full-precision KV pages in device memory and one batch per call. Weights stored as F32 stay
// fp32 and F16 stays f16; every other format (BF16, the GGUF block formats) is dequantized at
// load and held as bf16.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "model/device_forward.h"

namespace tq {

// Empty when a CUDA device is usable; else "no CUDA device: <the runtime's reason>".
std::string cuda_unavailable();

std::unique_ptr<DeviceForward> make_cuda_forward(const ModelConfig& config, const ModelWeights& weights,
                                                 const std::vector<float>& rope_inv_freq);

}  // namespace tq
