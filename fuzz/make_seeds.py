#!/usr/bin/env python3
"""Writes the seed corpora of the fuzzers into fuzz/corpus/<target>/ (committed; rerun to regenerate).

Every seed is small (a few KB at most) and made here from scratch: a tiny but complete Llama GGUF
with a SentencePiece tokenizer and a chat template (loads end to end), variants of it (Q8_0 and Q4_0
weights, truncated header, Qwen2 byte-level BPE vocabulary), safetensors files with config.json,
tokenizer.json files, OpenAI request bodies, tokenizer inputs and Jinja templates.
"""
import json
import os
import struct
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent / "corpus"

# ---------------------------------------------------------------------------------------- GGUF
T_U8, T_I8, T_U16, T_I16, T_U32, T_I32, T_F32, T_BOOL, T_STR, T_ARR, T_U64, T_I64, T_F64 = range(13)
GGML_F32, GGML_F16, GGML_Q4_0, GGML_Q8_0 = 0, 1, 2, 8


def gstr(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def gval(t, v):
    if t == T_STR:
        return gstr(v)
    if t == T_ARR:
        et, items = v
        return struct.pack("<IQ", et, len(items)) + b"".join(gval(et, x) for x in items)
    fmt = {T_U8: "B", T_I8: "b", T_U16: "H", T_I16: "h", T_U32: "I", T_I32: "i", T_F32: "f", T_BOOL: "?",
           T_U64: "Q", T_I64: "q", T_F64: "d"}[t]
    return struct.pack("<" + fmt, v)


def tensor_bytes(ggml_type, n, seed):
    vals = [((i * 37 + seed * 11) % 17 - 8) / 16.0 for i in range(n)]
    if ggml_type == GGML_F32:
        return struct.pack(f"<{n}f", *vals)
    if ggml_type == GGML_F16:
        return struct.pack(f"<{n}e", *vals)
    if ggml_type == GGML_Q8_0:  # blocks of 32: f16 scale + 32 int8
        out = b""
        for b in range(n // 32):
            out += struct.pack("<e", 0.01) + bytes((i * 7 + b) % 256 for i in range(32))
        return out
    if ggml_type == GGML_Q4_0:  # blocks of 32: f16 scale + 16 bytes of nibbles
        out = b""
        for b in range(n // 32):
            out += struct.pack("<e", 0.05) + bytes((i * 13 + b) % 256 for i in range(16))
        return out
    raise ValueError(ggml_type)


def gguf(metadata, tensors, alignment=32):
    """metadata: [(key, type, value)]; tensors: [(name, ne innermost first, ggml type)]."""
    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(metadata))
    for k, t, v in metadata:
        out += gstr(k) + struct.pack("<I", t) + gval(t, v)
    datas, offset = [], 0
    for i, (name, ne, gt) in enumerate(tensors):
        n = 1
        for d in ne:
            n *= d
        data = tensor_bytes(gt, n, i)
        out += gstr(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", d) for d in ne)
        out += struct.pack("<IQ", gt, offset)
        datas.append(data)
        offset += (len(data) + alignment - 1) // alignment * alignment
    out += b"\0" * ((-len(out)) % alignment)
    for d in datas:
        out += d + b"\0" * ((-len(d)) % alignment)
    return out


SP_TOKENS = ["<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"] + [f"<0x{b:02X}>" for b in (0x0A, 0x20, 0xC3, 0xA9)] + \
    ["\u2581", "\u2581H", "e", "l", "o", "\u2581w", "r", "d", "\u2581He", "ll", "\u2581Hello", "\u2581world", "!", "x",
     "\u2581user", "\u2581the", "t", "h", "a", "s"]
CHAT_TEMPLATE = ("{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}"
                 "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


def tiny_llama(weight_type=GGML_F32, vocab=32, hidden=32, ffn=64, tokenizer="llama", arch="llama"):
    tokens = SP_TOKENS[:vocab] + [f"t{i}" for i in range(vocab - len(SP_TOKENS[:vocab]))]
    token_type = [2 if t in ("<s>", "</s>") else 3 if t.startswith("<|") else 6 if t.startswith("<0x") else
                  2 if t == "<unk>" else 1 for t in tokens]
    meta = [("general.architecture", T_STR, arch), ("general.name", T_STR, "tiny"),
            (f"{arch}.context_length", T_U32, 64), (f"{arch}.embedding_length", T_U32, hidden),
            (f"{arch}.block_count", T_U32, 1), (f"{arch}.feed_forward_length", T_U32, ffn),
            (f"{arch}.attention.head_count", T_U32, 4), (f"{arch}.attention.head_count_kv", T_U32, 2),
            (f"{arch}.attention.layer_norm_rms_epsilon", T_F32, 1e-5), (f"{arch}.rope.freq_base", T_F32, 10000.0),
            ("tokenizer.ggml.model", T_STR, tokenizer)]
    if tokenizer == "gpt2":
        tokens = ["!", "H", "e", "l", "o", "\u0120", "w", "r", "d", "He", "ll", "llo", "Hello", "\u0120w", "or",
                  "\u0120wor", "\u0120world", "<|endoftext|>", "<|im_start|>", "<|im_end|>"]
        tokens += [f"x{i}" for i in range(vocab - len(tokens))]
        token_type = [3 if t.startswith("<|") else 1 for t in tokens]
        meta += [("tokenizer.ggml.pre", T_STR, "qwen2"),
                 ("tokenizer.ggml.merges", T_ARR, (T_STR, ["H e", "l l", "ll o", "He llo", "\u0120 w", "o r",
                                                            "\u0120w or", "\u0120wor l"]))]
    else:
        meta += [("tokenizer.ggml.scores", T_ARR, (T_F32, [-float(i) for i in range(vocab)]))]
    meta += [("tokenizer.ggml.tokens", T_ARR, (T_STR, tokens)),
             ("tokenizer.ggml.token_type", T_ARR, (T_I32, token_type)),
             ("tokenizer.ggml.bos_token_id", T_U32, 1 if tokenizer == "llama" else 17),
             ("tokenizer.ggml.eos_token_id", T_U32, 2 if tokenizer == "llama" else 17),
             ("tokenizer.ggml.add_bos_token", T_BOOL, tokenizer == "llama"),
             ("tokenizer.chat_template", T_STR, CHAT_TEMPLATE)]
    head_dim = hidden // 4
    wt = weight_type
    tensors = [("token_embd.weight", [hidden, vocab], wt), ("output_norm.weight", [hidden], GGML_F32),
               ("blk.0.attn_norm.weight", [hidden], GGML_F32), ("blk.0.attn_q.weight", [hidden, hidden], wt),
               ("blk.0.attn_k.weight", [hidden, 2 * head_dim], wt), ("blk.0.attn_v.weight", [hidden, 2 * head_dim], wt),
               ("blk.0.attn_output.weight", [hidden, hidden], wt), ("blk.0.ffn_norm.weight", [hidden], GGML_F32),
               ("blk.0.ffn_gate.weight", [hidden, ffn], wt), ("blk.0.ffn_up.weight", [hidden, ffn], wt),
               ("blk.0.ffn_down.weight", [ffn, hidden], wt)]
    if arch == "qwen2":
        tensors += [("blk.0.attn_q.bias", [hidden], GGML_F32), ("blk.0.attn_k.bias", [2 * head_dim], GGML_F32),
                    ("blk.0.attn_v.bias", [2 * head_dim], GGML_F32)]
    return gguf(meta, tensors)


def gguf_seeds():
    full = tiny_llama(hidden=8, ffn=16)
    yield "tiny_llama_f32.gguf", full
    # Quantized blocks hold 32 values: rows (hidden, ffn) must be multiples of 32.
    yield "tiny_llama_q4_0.gguf", tiny_llama(GGML_Q4_0, hidden=32, ffn=32)
    yield "tiny_qwen2_bpe_f16.gguf", tiny_llama(GGML_F16, vocab=24, hidden=8, ffn=16, tokenizer="gpt2", arch="qwen2")
    yield "truncated_header.gguf", full[:300]
    yield "metadata_only.gguf", gguf([("general.architecture", T_STR, "llama"), ("general.alignment", T_U32, 64),
                                      ("nested", T_ARR, (T_ARR, [(T_U8, [1, 2]), (T_I64, [-1])])),
                                      ("f64", T_F64, 2.5), ("i16", T_I16, -3), ("u64", T_U64, 2**63 + 5)], [])


# --------------------------------------------------------------------------------- safetensors
def safetensors(tensors, metadata=None):
    header, data = {}, b""
    if metadata:
        header["__metadata__"] = metadata
    for name, dtype, shape in tensors:
        n = 1
        for d in shape:
            n *= d
        size = {"F32": 4, "F16": 2, "BF16": 2}[dtype]
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + n * size]}
        data += bytes((i * 29) % 251 for i in range(n * size))
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((-len(h)) % 8)
    return struct.pack("<Q", len(h)) + h + data


def hf_model(hidden=16, ffn=32, vocab=16, arch="LlamaForCausalLM"):
    config = {"architectures": [arch], "vocab_size": vocab, "hidden_size": hidden, "num_hidden_layers": 1,
              "num_attention_heads": 2, "num_key_value_heads": 1, "intermediate_size": ffn,
              "max_position_embeddings": 64, "rope_theta": 10000.0, "rms_norm_eps": 1e-6, "tie_word_embeddings": True,
              "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                               "original_max_position_embeddings": 32}}
    kv = hidden // 2
    p = "model.layers.0."
    tensors = [("model.embed_tokens.weight", "BF16", [vocab, hidden]), ("model.norm.weight", "F32", [hidden]),
               (p + "input_layernorm.weight", "F32", [hidden]), (p + "self_attn.q_proj.weight", "F16", [hidden, hidden]),
               (p + "self_attn.k_proj.weight", "F16", [kv, hidden]), (p + "self_attn.v_proj.weight", "F16", [kv, hidden]),
               (p + "self_attn.o_proj.weight", "F16", [hidden, hidden]),
               (p + "post_attention_layernorm.weight", "F32", [hidden]),
               (p + "mlp.gate_proj.weight", "BF16", [ffn, hidden]), (p + "mlp.up_proj.weight", "BF16", [ffn, hidden]),
               (p + "mlp.down_proj.weight", "BF16", [hidden, ffn])]
    return json.dumps(config).encode(), safetensors(tensors, {"format": "pt"})


def tokenizer_json():
    vocab = {t: i for i, t in enumerate(["!", "H", "e", "l", "o", "\u0120", "w", "r", "d", "He", "ll", "llo",
                                         "Hello", "\u0120w", "or", "\u0120wor", "\u0120world"])}
    return json.dumps({
        "version": "1.0",
        "added_tokens": [{"id": 17, "content": "<|endoftext|>", "special": True},
                         {"id": 18, "content": "<|im_start|>", "special": True}],
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
             "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]},
        "decoder": {"type": "ByteLevel"},
        "model": {"type": "BPE", "vocab": vocab, "merges": ["H e", "l l", "ll o", "He llo", "\u0120 w", "o r",
                                                            "\u0120w or", "\u0120wor l"]},
    }).encode()


def safetensors_seeds():
    config, model = hf_model()
    yield "mode0_single.safetensors", b"\x00" + model
    yield "mode0_empty_header.safetensors", b"\x00" + struct.pack("<Q", 2) + b"{}"
    yield "mode1_config.json", b"\x01" + config
    with open(Path(__file__).resolve().parents[1].parent / "shared/testdata/references/config-Qwen3-0.6B.json", "rb") as f:
        yield "mode1_qwen3_config.json", b"\x01" + f.read()
    yield "mode2_model_dir", b"\x02" + config + b"\x00" + model
    yield "mode3_tokenizer_json", b"\x03" + tokenizer_json() + b"\x00" + json.dumps(
        {"bos_token": None, "eos_token": "<|endoftext|>", "chat_template": CHAT_TEMPLATE}).encode()


# ------------------------------------------------------------------------------------ requests
def request_seeds():
    reqs = {
        "completion_text": {"model": "fuzz-model", "prompt": "Hello world", "max_tokens": 8, "temperature": 0.7,
                            "top_p": 0.9, "stop": ["\n", "END"], "seed": 42, "logprobs": 2, "echo": True},
        "completion_ids": {"prompt": [[1, 2, 3], "text", [4]], "n": 2, "stream": True,
                           "stream_options": {"include_usage": True}, "stop_token_ids": [5, 6]},
        "completion_zero": {"prompt": [1, 2], "max_tokens": 0, "echo": True, "top_k": 5, "min_p": 0.1,
                            "presence_penalty": 1.5, "frequency_penalty": -0.5, "repetition_penalty": 1.1},
        "chat_basic": {"model": "fuzz-model", "messages": [{"role": "system", "content": "Be brief."},
                                                           {"role": "user", "content": "Hi!"}],
                       "max_completion_tokens": 16, "logprobs": True, "top_logprobs": 3},
        "chat_parts": {"messages": [{"role": "user", "content": [{"type": "text", "text": "a"},
                                                                {"type": "text", "text": "b"}]},
                                    {"role": "assistant", "content": None}],
                       "chat_template_kwargs": {"enable_thinking": False}, "ignore_eos": True},
        "bad_types": {"messages": "nope", "prompt": {"x": 1}, "temperature": "hot", "n": 1.5, "stop": [1]},
    }
    for name, body in reqs.items():
        yield name + ".json", json.dumps(body).encode()


# ----------------------------------------------------------------------------------- tokenizer
def tokenizer_seeds():
    texts = [b"Hello world! How are you?", "caf\u00e9 na\u00efve \u65e5\u672c\u8a9e \U0001F600".encode(),
             b"<|im_start|>user\nhi<|im_end|>\n<s></s><|endoftext|>", b"\xff\xfe invalid \xc3 utf8 \xe2\x82 \xf0\x9f\x98",
             b"   leading spaces\t\ttabs\r\n\n12345 3.14", b"A\xcc\x8a combining + \xef\xbc\xa1 fullwidth"]
    for tok in range(6):
        for i, t in enumerate(texts):
            if (tok + i) % 3 == 0 or i < 2:
                yield f"tok{tok}_{i}", bytes([tok, (i * 5) % 16]) + t


# ------------------------------------------------------------------------------- chat template
def template_seeds():
    yield "render_qwen_style", b"\x00" + CHAT_TEMPLATE.encode()
    yield "filters", b"\x00" + (
        "{%- set ns = namespace(n=0) -%}{% for m in messages | selectattr('role', 'equalto', 'user') %}"
        "{% set ns.n = ns.n + 1 %}{{ loop.index }}:{{ m.content | default('', true) | trim | upper }}"
        "{% if not loop.last %}, {% endif %}{% endfor %} {{ ns.n }} {{ tools | tojson(indent=2) }}"
        "{{ (messages | length) * 2 }} {{ 'a,b' .split(',') | join('|') }} {{ range(3) | list }}"
        "{{ bos_token ~ eos_token | replace('<', '[') }}{% if enable_thinking is defined %}T{% endif %}").encode()
    yield "macros_and_errors", b"\x00" + (
        "{% macro f(x, y=2) %}{{ x * y }}{% endmacro %}{{ f(3) }}{{ f('ab', y=3) }}"
        "{% for k, v in {'a': 1, 'b': [1, 2]}.items() %}{{ k }}={{ v }};{% endfor %}"
        "{{ messages[0]['content'][1:5] }}{{ -7 // 2 }} {{ 7 % 3 }} {{ 2 ** 10 }}"
        "{% if messages[-1].role != 'user' %}{{ raise_exception('last must be user') }}{% endif %}"
        "{{ strftime_now('%Y-%m-%d') }}").encode() + b"\x00" + json.dumps(
        {"messages": [{"role": "user", "content": "hello there"}], "extra": {"x": 1}}).encode()
    ctx = {"messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": "q"},
                        {"role": "assistant", "content": "<think>a</think>b",
                         "tool_calls": [{"function": {"name": "f", "arguments": "{\"a\": 1}"}}]},
                        {"role": "tool", "content": "r"}, {"role": "user", "content": "q2"}],
           "extra": {"enable_thinking": True, "tools": [{"type": "function", "function": {"name": "f"}}]},
           "add_generation_prompt": True}
    for i in range(4):
        yield f"real_template_{i}", bytes([2 * i + 1]) + json.dumps(ctx).encode()
    yield "real_template_plain_list", b"\x03" + json.dumps([{"role": "user", "content": "hi"}]).encode()


def structured_output_seeds():
    # byte 0: 0 JSON schema, 1 regex, 2 EBNF grammar, 3 choices (one per line), 4 any JSON object
    yield "schema_object", b"\x00" + json.dumps({"type": "object", "properties": {
        "a": {"type": "integer", "minimum": 0}, "b": {"enum": ["x", "y"]}, "c": {"type": "string", "maxLength": 5}},
        "required": ["a"], "additionalProperties": False}).encode()
    yield "schema_array", b"\x00" + json.dumps({"type": "array", "items": {"type": "number"}, "maxItems": 3}).encode()
    yield "schema_recursive", b"\x00" + json.dumps({"$defs": {"n": {"type": "object", "properties": {
        "next": {"anyOf": [{"$ref": "#/$defs/n"}, {"type": "null"}]}}}}, "$ref": "#/$defs/n"}).encode()
    yield "regex", b"\x01[a-z]{2,5}-[0-9]+(\\.[0-9]+)?"
    yield "grammar", b'\x02root ::= item (", " item)*\nitem ::= "red" | "green" | [0-9]+'
    yield "choice", b"\x03yes\nno\nmaybe"
    yield "json_object", b"\x04"


def main():
    groups = {"gguf": gguf_seeds, "safetensors": safetensors_seeds, "request": request_seeds,
              "tokenizer": tokenizer_seeds, "chat_template": template_seeds,
              "structured_output": structured_output_seeds}
    for target, make in groups.items():
        d = ROOT / target
        d.mkdir(parents=True, exist_ok=True)
        for name, data in make():
            (d / name).write_bytes(data)
    total = sum(f.stat().st_size for f in ROOT.rglob("*") if f.is_file())
    print(f"seeds written to {ROOT} ({total} bytes)")


if __name__ == "__main__":
    sys.exit(main())
