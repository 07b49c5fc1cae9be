#!/usr/bin/env python3
"""Writes tests/data/dequant_golden.json: ggml-format blocks and their fp32 values as computed by
the `gguf` Python package (gguf.quants), an implementation independent of ours.

Blocks come from gguf.quants.quantize where the package can quantize the type, plus random
bytes whose fp16 scale fields are overwritten with sane values (random bytes there would give
inf/NaN scales and test nothing useful); random bytes reach every scale/bit pattern.
Also fp32 -> fp16 (numpy, round-to-nearest-even) and fp32 -> bf16 (gguf's ggml-equivalent
rounding) samples, including ties, subnormals, overflow, inf and NaN.

Usage: python tools/gen_dequant_golden.py [out.json]   (pip install gguf numpy)
"""
import base64
import json
import sys
from importlib.metadata import version

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import GGML_QUANT_SIZES, quants

SEED = 20240611

# Byte offsets of the fp16 scale fields in each block (ggml-common.h block structs).
FP16_FIELDS = {
    T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2], T.Q8_0: [0],
    T.Q2_K: [80, 82], T.Q3_K: [108], T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208],
}
QUANTIZABLE = {T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0, T.BF16}


def b64(array: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(array).tobytes()).decode("ascii")


def random_blocks(rng, qtype, n_blocks):
    block_elems, block_bytes = GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, size=(n_blocks, block_bytes), dtype=np.uint8)
    for offset in FP16_FIELDS[qtype]:
        # Positive and negative scales over a few orders of magnitude.
        scale = (rng.uniform(1e-3, 2.0, size=n_blocks) * rng.choice([-1, 1], size=n_blocks))
        raw[:, offset:offset + 2] = scale.astype(np.float16).view(np.uint8).reshape(n_blocks, 2)
    return raw


def quant_case(rng, qtype):
    block_elems, block_bytes = GGML_QUANT_SIZES[qtype]
    parts = []
    if qtype in QUANTIZABLE:
        values = (rng.standard_normal(max(2 * block_elems, 64)) * rng.uniform(0.01, 3.0)).astype(np.float32)
        parts.append(quants.quantize(values.reshape(1, -1), qtype).reshape(-1, block_bytes))
    if qtype in FP16_FIELDS:
        parts.append(random_blocks(rng, qtype, 3 if block_elems == 256 else 2))
    blocks = np.concatenate(parts, axis=0)
    expected = quants.dequantize(blocks.reshape(1, -1), qtype).astype(np.float32).reshape(-1)
    return {
        "name": qtype.name.lower(),
        "ggml_type": int(qtype.value),
        "n": int(expected.size),
        "blocks_b64": b64(blocks),
        "expected_f32_b64": b64(expected.astype("<f4")),
    }


def half_ties(rng, count):
    """fp32 values exactly halfway between neighbouring fp16 values (normal and subnormal)."""
    halves = rng.integers(0, 0x7BFF, size=count, dtype=np.uint16)  # finite, below max
    lo = halves.view(np.float16).astype(np.float64)
    hi = (halves + 1).view(np.float16).astype(np.float64)
    signs = rng.choice([-1.0, 1.0], size=count)
    return ((lo + hi) / 2 * signs).astype(np.float32)


def fp16_samples(rng):
    special = np.array([0.0, -0.0, 1.0, -2.5, 65504.0, 65519.99, 65520.0, 65536.0, 1e10, -1e10,
                        2.0**-14, 2.0**-24, 2.0**-25, 2.0**-25 * 1.0000001, 2.0**-26, 1e-40,
                        np.inf, -np.inf, 0.1, 1.0 / 3.0], dtype=np.float32)
    wide = (rng.standard_normal(300) * np.exp2(rng.uniform(-30, 20, 300))).astype(np.float32)
    bits = rng.integers(0, 2**32, size=200, dtype=np.uint64).astype(np.uint32).view(np.float32)
    bits = bits[np.isfinite(bits)]
    f32 = np.concatenate([special, wide, bits, half_ties(rng, 300)]).astype(np.float32)
    with np.errstate(over="ignore"):
        f16 = f32.astype(np.float16)
    return {"f32_b64": b64(f32.astype("<f4")), "f16_b64": b64(f16.view("<u2"))}


def bf16_samples(rng):
    special = np.array([0.0, -0.0, 1.0, np.inf, -np.inf, 3.3895314e38, -3.4028235e38, 1e-40,
                        1.0 + 2.0**-8, 1.0 + 3 * 2.0**-8, np.nan], dtype=np.float32)
    # ties: the 16 dropped bits are exactly 0x8000
    tie_bits = (rng.integers(0, 0x7F7F, size=200, dtype=np.uint32) << 16) | 0x8000
    wide = (rng.standard_normal(300) * np.exp2(rng.uniform(-100, 100, 300))).astype(np.float32)
    nan_payload = np.array([0x7F800001, 0xFF800001, 0x7FC00000, 0x7F810000], dtype=np.uint32)
    f32 = np.concatenate([special, tie_bits.view(np.float32), wide,
                          nan_payload.view(np.float32)]).astype(np.float32)
    bf16 = quants.quantize(f32.reshape(1, -1), T.BF16).view("<u2").reshape(-1)
    return {"f32_b64": b64(f32.astype("<f4")), "bf16_b64": b64(bf16)}


def main():
    out_path = sys.argv[1] if len(sys.argv) > 1 else "tests/data/dequant_golden.json"
    rng = np.random.default_rng(SEED)
    types = [T.F32, T.F16, T.BF16, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0,
             T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K]
    cases = []
    for qtype in types:
        if qtype == T.F32:
            values = np.concatenate([rng.standard_normal(30), [np.inf, -0.0]]).astype("<f4")
            cases.append({"name": "f32", "ggml_type": int(qtype.value), "n": 32,
                          "blocks_b64": b64(values),
                          "expected_f32_b64": b64(quants.dequantize(values.view(np.uint8), qtype))})
        elif qtype == T.F16:
            values = rng.standard_normal(64).astype(np.float16)
            cases.append({"name": "f16", "ggml_type": int(qtype.value), "n": 64,
                          "blocks_b64": b64(values.view("<u2")),
                          "expected_f32_b64": b64(values.astype("<f4"))})
        else:
            cases.append(quant_case(rng, qtype))
    golden = {
        "generator": f"tools/gen_dequant_golden.py seed {SEED}, gguf {version('gguf')}, "
                     f"numpy {np.__version__}",
        "types": cases,
        "fp16_from_f32": fp16_samples(rng),
        "bf16_from_f32": bf16_samples(rng),
    }
    with open(out_path, "w") as f:
        json.dump(golden, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
