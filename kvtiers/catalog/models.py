"""Shapes of the models the sizing knows, and how to read one from a Hugging Face ``config.json``.

KV bytes per token = 2 (K and V) x layers x KV heads x head dim x bytes per element. The numbers below are from the
models' published configs (Qwen2-7B-Instruct: 28 layers, 4 KV heads, head dim 128 -> 57,344 B in bf16).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}


@dataclass(frozen=True)
class ModelShape:
    """What the cache sizing needs to know about a model."""

    layers: int
    kv_heads: int
    head_dim: int
    parameters: float
    """Parameter count, used for the weight size."""
    gated: bool = False
    """The Hub serves the model (and its tokenizer) only with an accepted licence and a token."""

    def kv_bytes_per_token(self, dtype: str) -> int:
        return 2 * self.layers * self.kv_heads * self.head_dim * DTYPE_BYTES[dtype]

    def weight_bytes(self, dtype: str) -> int:
        return int(self.parameters * DTYPE_BYTES[dtype])

    @classmethod
    def from_hf_config(cls, path: Path, parameters: float) -> ModelShape:
        """Read layers, KV heads and head dim from a local Hugging Face ``config.json``."""
        cfg = json.loads(Path(path).read_text())
        heads = cfg["num_attention_heads"]
        head_dim = cfg.get("head_dim") or cfg["hidden_size"] // heads
        return cls(
            layers=cfg["num_hidden_layers"],
            kv_heads=cfg.get("num_key_value_heads", heads),
            head_dim=head_dim,
            parameters=parameters,
        )


KNOWN_MODELS: dict[str, ModelShape] = {
    "Qwen/Qwen2-7B-Instruct": ModelShape(layers=28, kv_heads=4, head_dim=128, parameters=7.62e9),
    "Qwen/Qwen2.5-32B-Instruct": ModelShape(layers=64, kv_heads=8, head_dim=128, parameters=32.5e9),
    "meta-llama/Llama-3.1-8B-Instruct": ModelShape(layers=32, kv_heads=8, head_dim=128, parameters=8.03e9, gated=True),
    "meta-llama/Llama-3.1-70B-Instruct": ModelShape(layers=80, kv_heads=8, head_dim=128, parameters=70.6e9, gated=True),
}
