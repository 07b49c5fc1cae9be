"""The Hugging Face config.json fields of the real architectures whose shapes the timing models
copy (bench/make_model writes them as GGUF, bench/make_hf_model as safetensors)."""

CONFIGS = {
    "qwen3-1.7b": {
        "model_type": "qwen3", "hidden_size": 2048, "intermediate_size": 6144, "num_hidden_layers": 28,
        "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128, "max_position_embeddings": 40960,
        "rms_norm_eps": 1e-06, "rope_theta": 1000000, "rope_scaling": None, "tie_word_embeddings": True,
        "vocab_size": 151936, "bos_token_id": 151643, "eos_token_id": 151645, "initializer_range": 0.02,
    },
    "qwen3-4b": {
        "model_type": "qwen3", "hidden_size": 2560, "intermediate_size": 9728, "num_hidden_layers": 36,
        "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "max_position_embeddings": 40960,
        "rms_norm_eps": 1e-06, "rope_theta": 1000000, "rope_scaling": None, "tie_word_embeddings": True,
        "vocab_size": 151936, "bos_token_id": 151643, "eos_token_id": 151645, "initializer_range": 0.02,
    },
    "llama-3.2-3b": {
        "model_type": "llama", "hidden_size": 3072, "intermediate_size": 8192, "num_hidden_layers": 28,
        "num_attention_heads": 24, "num_key_value_heads": 8, "head_dim": 128, "max_position_embeddings": 131072,
        "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
        "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                         "original_max_position_embeddings": 8192, "rope_type": "llama3"},
        "tie_word_embeddings": True, "vocab_size": 128256, "bos_token_id": 128000, "eos_token_id": 128009,
        "initializer_range": 0.02,
    },
}
