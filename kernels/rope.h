// Rotary position embedding. Two pairings of the head_dim values:
//   - RopePairing::Half (Hugging Face `rotate_half`, llama.cpp NEOX): pairs (i, i + d/2);
//   - RopePairing::Adjacent (original Meta / GGUF llama, whose Q/K weights are permuted for it):
//     pairs (2i, 2i + 1).
// Both rotate pair i by angle pos * inv_freq[i].
#pragma once
#include <cstdint>
#include <vector>

namespace tq {

enum class RopePairing { Half, Adjacent };

// Frequencies 1 / theta^(2i/d) for i in [0, d/2), as fp32 (HF computes them in fp32).
std::vector<float> rope_base_inv_freq(int head_dim, double theta);

// x: [n_heads, head_dim] for one token at position `pos`; rotated in place.
// inv_freq: [head_dim / 2].
void apply_rope(float* x, int n_heads, int head_dim, int64_t pos, const float* inv_freq, RopePairing pairing);

}  // namespace tq
