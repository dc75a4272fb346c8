"""A tiny, random, fully local model pool for gateway tests and benchmarks: a byte-level BPE
tokenizer trained here with a chat template, a random 4-layer Llama target, and two random
EAGLE-3 drafters saved in the official checkpoint format, tied together by a pool.json. Nothing
is downloaded."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from core.model.eagle3 import Eagle3Config, Eagle3Drafter, build_vocab_mapping, save_drafter

SPECIALS = ("<|pad|>", "<|end|>", "<|user|>", "<|assistant|>", "<|system|>")
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}<|end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
AUX_LAYERS = (1, 2, 3)
DRAFTER_IDS = ("alpha", "beta")
MODEL_NAME = "tiny-target"

# A few KB of text with multi-byte characters, so detokenization meets split UTF-8 sequences.
_SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "Speculative decoding drafts tokens and the target verifies them in one pass.",
    "SELECT name, count(*) FROM users GROUP BY name ORDER BY 2 DESC;",
    "def add(a, b):\n    return a + b\n",
    "Café crème brûlée — naïve façade, déjà vu.",
    "数学 和 化学 是 科学 的 一部分。",
    "Emoji test: 🚀 🐍 ✨ and arrows → ← ↑ ↓.",
    "The mitochondria is the powerhouse of the cell.",
    "Question: what is 12 times 7? Answer: 84. #### 84",
]
TEXT = [s for _ in range(40) for s in _SENTENCES]


def train_tokenizer(vocab_size: int = 384) -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIALS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(TEXT, trainer=trainer)
    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|end|>",
        pad_token="<|pad|>",
        additional_special_tokens=["<|user|>", "<|assistant|>", "<|system|>"],
        model_max_length=512,
    )
    hf.chat_template = CHAT_TEMPLATE
    return hf


def build_target(
    out: Path,
    tokenizer: PreTrainedTokenizerFast,
    *,
    hidden: int = 64,
    layers: int = 4,
    seed: int = 0,
) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        # A wide init gives peaked, varied next-token distributions (not near-uniform noise).
        initializer_range=0.3,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(config).eval()
    model.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    return model


def build_drafter(out: Path, target: LlamaForCausalLM, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    draft_vocab = min(128, target.config.vocab_size)
    cfg = Eagle3Config.for_target(
        target.config, draft_vocab_size=draft_vocab, aux_layers=AUX_LAYERS
    )
    embeddings = target.get_input_embeddings()
    assert isinstance(embeddings, torch.nn.Embedding)  # shared with the target, as published
    drafter = Eagle3Drafter(cfg, embeddings)
    with torch.no_grad():
        for p in drafter.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.3)
    counts = torch.randint(0, 100, (cfg.vocab_size,), generator=gen)
    drafter.set_vocab_mapping(*build_vocab_mapping(counts, draft_vocab))
    save_drafter(drafter, out, dtype=torch.float32)


def build_pool(root: Path, *, hidden: int = 64, layers: int = 4) -> Path:
    """Write the pool under `root` and return its pool.json."""
    tokenizer = train_tokenizer()
    target = build_target(root / MODEL_NAME, tokenizer, hidden=hidden, layers=layers)
    for i, drafter_id in enumerate(DRAFTER_IDS):
        build_drafter(root / "drafters" / drafter_id, target, seed=100 + i)
    pool = {
        "target": MODEL_NAME,
        "drafters": [{"id": d, "domain": "test", "path": f"drafters/{d}"} for d in DRAFTER_IDS],
    }
    path = root / "pool.json"
    path.write_text(json.dumps(pool, indent=2))
    return path
