#include "model/device_forward.h"

#include "errors/error.h"
#ifdef TQ_HAVE_CUDA
#include "model/cuda/cuda_forward.h"
#endif

namespace tq {

ComputeDevice parse_compute_device(const std::string& name) {
  if (name == "cpu") return ComputeDevice::Cpu;
  if (name == "cuda") return ComputeDevice::Cuda;
  fail("unknown device '{}' (choices: cpu, cuda)", name);
}

const char* compute_device_name(ComputeDevice device) { return device == ComputeDevice::Cuda ? "cuda" : "cpu"; }

std::string compute_device_unavailable(ComputeDevice device) {
  if (device == ComputeDevice::Cpu) return {};
#ifdef TQ_HAVE_CUDA
  return cuda_unavailable();
#else
  return "this build has no CUDA backend (configure with -DTQ_CUDA=ON where nvcc is installed)";
#endif
}

std::string device_cache_unsupported(ComputeDevice device, const KvCacheShape& shape) {
  if (device == ComputeDevice::Cpu) return {};
  for (int l = 0; l < shape.num_layers; ++l) {
    const KvDtype k = shape.k_dtype_of(l), v = shape.v_dtype_of(l);
    if (k != v || (k != KvDtype::F16 && k != KvDtype::F32))
      return fmt::format("the KV cache of layer {} is {}/{}; the CUDA backend stores f16 or f32 K and V so far", l,
                         kv_dtype_name(k), kv_dtype_name(v));
  }
  if (shape.windows.any()) return "KV windows are for quantized caches, which the CUDA backend lacks so far";
  return {};
}

std::unique_ptr<DeviceForward> make_device_forward(ComputeDevice device, const ModelConfig& config,
                                                   const ModelWeights& weights,
                                                   const std::vector<float>& rope_inv_freq) {
  if (device == ComputeDevice::Cpu) return nullptr;
  if (const std::string why = compute_device_unavailable(device); !why.empty()) fail("--device cuda: {}", why);
#ifdef TQ_HAVE_CUDA
  return make_cuda_forward(config, weights, rope_inv_freq);
#else
  return nullptr;  // unreachable: compute_device_unavailable() said why above
#endif
}

}  // namespace tq
