"""Tiny EAGLE-3-shaped checkpoints (config.json + model.safetensors) built with numpy.

Shapes follow the official format (eagle3_format/weights.py `expected_shapes`), so the
same files pass the registry's cheap checks and the full `inspect_drafter`; values are random
(seeded) and useless.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from safetensors.numpy import save

HIDDEN, HEADS, INTERMEDIATE, VOCAB, DRAFT_VOCAB = 16, 2, 32, 64, 32


def drafter_config(*, hidden: int = HIDDEN, vocab: int = VOCAB,
                   draft_vocab: int = DRAFT_VOCAB) -> dict[str, Any]:
    return {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": hidden,
        "intermediate_size": INTERMEDIATE,
        "num_attention_heads": HEADS,
        "num_key_value_heads": HEADS,
        "vocab_size": vocab,
        "draft_vocab_size": draft_vocab,
        "rms_norm_eps": 1e-5,
    }


def drafter_tensors(config: dict[str, Any], *, seed: int = 0,
                    extra_rows: int = 0) -> dict[str, np.ndarray]:
    """`extra_rows` > 0 makes lm_head disagree with config.json (a shape mismatch)."""
    rng = np.random.default_rng(seed)
    h, v, dv = config["hidden_size"], config["vocab_size"], config["draft_vocab_size"]
    i = config["intermediate_size"]

    def w(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32)

    return {
        "fc.weight": w(h, 3 * h),
        "midlayer.hidden_norm.weight": np.ones(h, np.float32),
        "midlayer.input_layernorm.weight": np.ones(h, np.float32),
        "midlayer.post_attention_layernorm.weight": np.ones(h, np.float32),
        "midlayer.self_attn.q_proj.weight": w(h, 2 * h),
        "midlayer.self_attn.k_proj.weight": w(h, 2 * h),
        "midlayer.self_attn.v_proj.weight": w(h, 2 * h),
        "midlayer.self_attn.o_proj.weight": w(h, h),
        "midlayer.mlp.gate_proj.weight": w(i, h),
        "midlayer.mlp.up_proj.weight": w(i, h),
        "midlayer.mlp.down_proj.weight": w(h, i),
        "norm.weight": np.ones(h, np.float32),
        "lm_head.weight": w(dv + extra_rows, h),
        "d2t": np.zeros(dv, np.int64),
        "t2d": np.arange(v) < dv,
    }


def drafter_files(prefix: str = "", *, seed: int = 0, pad_to: int = 0,
                  **config_kw: Any) -> dict[str, bytes]:
    """Hub-layout files of one drafter under `prefix/`; `pad_to` grows the weight file to at
    least that many bytes, for throttled-transfer tests (in the header's free-form metadata, so
    that the tensors stay exactly what the config implies)."""
    config = drafter_config(**config_kw)
    tensors = drafter_tensors(config, seed=seed)
    size = len(save(tensors))
    metadata = {"padding": "0" * (pad_to - size)} if pad_to > size else None
    base = f"{prefix}/" if prefix else ""
    return {
        f"{base}config.json": json.dumps(config, indent=2).encode(),
        f"{base}model.safetensors": save(tensors, metadata=metadata),
    }


def write_files(root: Path, files: dict[str, bytes]) -> Path:
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    return root


def write_target_config(root: Path, *, hidden: int = HIDDEN, vocab: int = VOCAB) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    config = {"architectures": ["LlamaForCausalLM"], "hidden_size": hidden, "vocab_size": vocab,
              "num_hidden_layers": 6, "num_attention_heads": HEADS}
    (root / "config.json").write_text(json.dumps(config))
    return root
