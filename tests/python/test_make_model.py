"""bench/make_model: random-weight GGUFs with real architectures' shapes (timing only). Checked against
the real Hugging Face config in the test data, llama.cpp's tokenizer vectors, and by loading the file."""
import importlib.machinery
import importlib.util
import json
import subprocess
import sys

import pytest

from conftest import REPO

MAKE_MODEL = REPO / "bench" / "make_model"


def load_make_model():
    sys.path.insert(0, str(REPO / "bench"))
    loader = importlib.machinery.SourceFileLoader("make_model", str(MAKE_MODEL))
    spec = importlib.util.spec_from_loader("make_model", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def test_qwen3_4b_config_is_the_real_one(testdata):
    real = json.loads((testdata / "references" / "config-Qwen3-4B.json").read_text())
    ours = load_make_model().CONFIGS["qwen3-4b"]
    assert {k: real.get(k) for k in ours} == ours


def test_llama3_rope_factors():
    # Llama 3.1/3.2's rope scaling (factor 32, low 1, high 4, original 8192; theta 5e5, head_dim 128):
    # pair i has wavelength 2 pi 5e5^(2i/128); the 29 pairs under 2048 keep their frequency, the 29
    # over 8192 (pair 35 on: 8219) are divided by 32, and pairs 29-34 (2402 .. 6695) lie between.
    make_model = load_make_model()
    factors = make_model.llama3_rope_factors(make_model.CONFIGS["llama-3.2-3b"])
    assert factors.shape == (64,)
    assert list(factors[:29]) == [1.0] * 29 and list(factors[35:]) == [32.0] * 29
    assert all(1.0 < f < 32.0 for f in factors[29:35])
    assert all(a < b for a, b in zip(factors[28:36], factors[29:36]))  # longer wavelengths stretched more


def test_written_file_loads_tokenizes_and_generates(tqserve, testdata, tmp_path):
    pytest.importorskip("gguf")
    gguf = sys.modules["gguf"]
    proc = subprocess.run([sys.executable, str(MAKE_MODEL), "qwen3-1.7b", "f16", "--layers", "1", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    path = proc.stdout.strip().splitlines()[-1]
    assert path == str(tmp_path / "qwen3-1.7b-1l-f16.gguf")

    # Tensor names and shapes as llama.cpp's converter writes Qwen3-1.7B (ggml order: columns first).
    tensors = {t.name: [int(x) for x in t.shape] for t in gguf.GGUFReader(path).tensors}
    assert tensors == {
        "token_embd.weight": [2048, 151936], "blk.0.attn_norm.weight": [2048],
        "blk.0.attn_q.weight": [2048, 2048], "blk.0.attn_k.weight": [2048, 1024], "blk.0.attn_v.weight": [2048, 1024],
        "blk.0.attn_output.weight": [2048, 2048], "blk.0.attn_q_norm.weight": [128], "blk.0.attn_k_norm.weight": [128],
        "blk.0.ffn_norm.weight": [2048], "blk.0.ffn_gate.weight": [2048, 6144], "blk.0.ffn_up.weight": [2048, 6144],
        "blk.0.ffn_down.weight": [6144, 2048], "output_norm.weight": [2048]}

    info = json.loads(tqserve("info", "--model", path, "--json").stdout)
    assert (info["architecture"], info["hidden_size"], info["intermediate_size"], info["attention_heads"],
            info["kv_heads"], info["head_dim"], info["vocab_size"], info["layers"], info["context_length"],
            info["tied_embeddings"], info["chat_template"]) == ("qwen3", 2048, 6144, 16, 8, 128, 151936, 1, 40960,
                                                                 True, True)

    # The vocabulary is Qwen's: llama.cpp's qwen2 tokenizer vectors give the same ids.
    vocab = testdata / "llama.cpp-vocab"
    texts = (vocab / "ggml-vocab-qwen2.gguf.inp").read_text(encoding="utf-8").split("\n__ggml_vocab_test__\n")[:-1]
    expected = [[int(x) for x in line.split()] for line in
                (vocab / "ggml-vocab-qwen2.gguf.out").read_text(encoding="utf-8").split("\n")[:len(texts)]]
    jsonl = tmp_path / "texts.jsonl"
    jsonl.write_text("".join(json.dumps(t) + "\n" for t in texts), encoding="utf-8")
    got = [json.loads(line) for line in tqserve("tokenize", "--model", path, "--jsonl", jsonl).stdout.splitlines()]
    assert got == expected

    out = tqserve("generate", "--model", path, "--prompt", "Hello", "--max-tokens", "4", "--ignore-eos").stderr
    assert "generated: 4 tokens" in out
