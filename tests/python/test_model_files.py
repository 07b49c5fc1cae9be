"""Model folders and files: what loads, and the clear errors for what does not."""
import json
import shutil

from conftest import REPO, generate_json

TINY = REPO / "tests" / "data" / "tiny"


def _copy(tmp_path, name):
    dst = tmp_path / name
    shutil.copytree(TINY / name, dst)
    return dst


def test_hf_folder_and_its_gguf_generate_the_same_tokens(tqserve):
    a = generate_json(tqserve, "--model", TINY / "qwen3-f32", "--prompt", "The quick brown", "--temperature", "0",
                      "--max-tokens", "8", "--ignore-eos", "--kv-cache-dtype", "f32")
    b = generate_json(tqserve, "--model", TINY / "qwen3-f32.gguf", "--prompt", "The quick brown", "--temperature", "0",
                      "--max-tokens", "8", "--ignore-eos", "--kv-cache-dtype", "f32")
    assert a["prompt_ids"] == b["prompt_ids"] and a["ids"] == b["ids"] and len(a["ids"]) == 8


def test_sharded_bf16_folder_loads(tqserve):
    info = json.loads(tqserve("info", "--model", TINY / "qwen3-bf16", "--json").stdout)
    assert info["architecture"] == "qwen3" and info["stored_dtypes"] == {"bf16": info["stored_dtypes"]["bf16"]}
    assert info["head_dim"] == 32 and info["tied_embeddings"] is True


def test_unknown_architecture_is_named(tqserve, tmp_path):
    d = _copy(tmp_path, "llama-f32")
    cfg = json.loads((d / "config.json").read_text())
    cfg["architectures"] = ["MambaForCausalLM"]
    (d / "config.json").write_text(json.dumps(cfg))
    proc = tqserve("info", "--model", d, check=False)
    assert proc.returncode != 0
    assert "MambaForCausalLM" in proc.stderr and "config.json" in proc.stderr


def test_missing_tensor_is_named(tqserve, tmp_path):
    d = _copy(tmp_path, "llama-f32")
    cfg = json.loads((d / "config.json").read_text())
    cfg["num_hidden_layers"] += 1  # the file has no weights for the extra layer
    (d / "config.json").write_text(json.dumps(cfg))
    proc = tqserve("generate", "--model", d, "--prompt-ids", "1", check=False)
    assert proc.returncode != 0
    assert f"model.layers.{cfg['num_hidden_layers'] - 1}." in proc.stderr and "missing" in proc.stderr


def test_shape_mismatch_is_named(tqserve, tmp_path):
    d = _copy(tmp_path, "qwen2-f32")
    cfg = json.loads((d / "config.json").read_text())
    cfg["intermediate_size"] *= 2
    (d / "config.json").write_text(json.dumps(cfg))
    proc = tqserve("generate", "--model", d, "--prompt-ids", "1", check=False)
    assert proc.returncode != 0 and "shape" in proc.stderr and "mlp" in proc.stderr


def test_truncated_safetensors_is_named(tqserve, tmp_path):
    d = _copy(tmp_path, "qwen2-f32")
    st = d / "model.safetensors"
    st.write_bytes(st.read_bytes()[:1000])
    proc = tqserve("info", "--model", d, check=False)
    assert proc.returncode != 0 and "model.safetensors" in proc.stderr


def test_truncated_gguf_is_named(tqserve, tmp_path):
    bad = tmp_path / "cut.gguf"
    bad.write_bytes((TINY / "llama-f32.gguf").read_bytes()[:5000])
    proc = tqserve("generate", "--model", bad, "--prompt", "x", check=False)
    assert proc.returncode != 0 and str(bad) in proc.stderr


def test_dequantized_weights_path_runs(tqserve):
    out = generate_json(tqserve, "--model", TINY / "qwen3-q8_0.gguf", "--dequantize-weights", "--prompt-ids",
                        "1,2,3", "--temperature", "0", "--max-tokens", "4", "--ignore-eos")
    assert len(out["ids"]) == 4


def test_config_values_of_the_wrong_type_or_size_are_named(tqserve, tmp_path):
    d = _copy(tmp_path, "llama-f32")
    cfg = json.loads((d / "config.json").read_text())
    cfg["rope_theta"] = "1e4"
    (d / "config.json").write_text(json.dumps(cfg))
    proc = tqserve("info", "--model", d, check=False)
    assert proc.returncode != 0 and "config.json" in proc.stderr
    cfg["rope_theta"] = 10000.0
    cfg["hidden_size"] = 4294967360
    (d / "config.json").write_text(json.dumps(cfg))
    proc = tqserve("info", "--model", d, check=False)
    assert proc.returncode != 0 and "hidden_size" in proc.stderr
