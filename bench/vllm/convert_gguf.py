# One-time: dequantize a GGUF into a plain HF folder (config.json, tokenizer, safetensors)
# that vLLM 0.32 can load (it has no GGUF loader). Run by scripts/setup_vllm.sh:
#   build/vllm-venv/bin/python bench/vllm/convert_gguf.py GGUF_DIR GGUF_NAME OUT_DIR [DTYPE]
# DTYPE: a torch dtype name for the saved weights (default float32; bfloat16 halves a large model's folder).
import sys, torch
from transformers import AutoModelForCausalLM, AutoTokenizer
src_dir, fn, out = sys.argv[1], sys.argv[2], sys.argv[3]
dtype = getattr(torch, sys.argv[4] if len(sys.argv) > 4 else "float32", None)
if not isinstance(dtype, torch.dtype):
    sys.exit(f"convert_gguf: '{sys.argv[4]}' is not a torch dtype (e.g. float32, bfloat16)")
tok = AutoTokenizer.from_pretrained(src_dir, gguf_file=fn)
m = AutoModelForCausalLM.from_pretrained(src_dir, gguf_file=fn, dtype=dtype)
# weights are already dequantized; drop the GGUF quantizer so it serializes
if hasattr(m.config, "quantization_config"):
    del m.config.quantization_config
m.hf_quantizer = None
m.is_quantized = False
tok.save_pretrained(out); m.save_pretrained(out)
print("saved", out)
