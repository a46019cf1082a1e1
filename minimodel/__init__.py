"""minimodel: Qwen3 inference built step by step, from tokens to a paged-KV engine."""
