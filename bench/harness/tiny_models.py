"""Tiny models built on the spot for tests and benchmarks: random Llama/Qwen3/Mistral targets,
random EAGLE-3 drafters, and a constructed (bigram) target with a drafter that copies it exactly."""

from __future__ import annotations

from typing import Any

import torch
from transformers import (
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

from core.config import EngineConfig, SelectorConfig, TreeConfig
from core.engine import SpecEngine
from core.model.eagle3 import Eagle3Config, Eagle3Drafter, build_vocab_mapping
from core.model.target import Target
from core.speculation.sampling import PositionNoise

AUX = (1, 2, 3)
# A transformers `*ForCausalLM`: its `.config`, `.model.layers` and `.lm_head` are attributes
# that `torch.nn.Module`'s typing cannot see, so the helpers take and return it untyped.
CausalLM = Any


def tiny_target(family: str = "llama", *, vocab: int = 64, hidden: int = 32, layers: int = 4,
                seed: int = 0, sliding_window: int = 4096) -> CausalLM:
    """`family`: llama, qwen2 (biased q/k/v), qwen3 or mistral; `sliding_window` is Mistral's
    (7B-v0.1 ships 4096)."""
    torch.manual_seed(seed)
    common: dict[str, Any] = dict(vocab_size=vocab, hidden_size=hidden,
                                  intermediate_size=2 * hidden, num_hidden_layers=layers,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                  eos_token_id=None, bos_token_id=None, pad_token_id=None, initializer_range=0.2)
    if family == "qwen2":
        model: CausalLM = Qwen2ForCausalLM(Qwen2Config(**common))
    elif family == "qwen3":
        model = Qwen3ForCausalLM(Qwen3Config(head_dim=hidden // 4, **common))
    elif family == "mistral":
        model = MistralForCausalLM(MistralConfig(sliding_window=sliding_window, **common))
    else:
        model = LlamaForCausalLM(LlamaConfig(**common))
    return model.eval().requires_grad_(False)


def random_drafter(target: CausalLM, *, draft_vocab: int = 48, seed: int = 1,
                   aux: tuple[int, int, int] = AUX, scale: float = 0.3) -> Eagle3Drafter:
    gen = torch.Generator().manual_seed(seed)
    cfg = Eagle3Config.for_target(target.config, draft_vocab_size=draft_vocab, aux_layers=aux)
    d = Eagle3Drafter(cfg, target.get_input_embeddings())
    with torch.no_grad():
        for p in d.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * scale)
    counts = torch.randint(0, 100, (cfg.vocab_size,), generator=gen)
    d.set_vocab_mapping(*build_vocab_mapping(counts, draft_vocab))
    return d.eval().requires_grad_(False)


def bigram_target(vocab: int = 32, layers: int = 4, seed: int = 0) -> tuple[CausalLM, list[int]]:
    """A Llama whose next token is perm[current token]: attention and MLP outputs are zero,
    embeddings are scaled one-hots and lm_head is a permutation. Returns (model, perm)."""
    model = tiny_target("llama", vocab=vocab, hidden=vocab, layers=layers, seed=seed)
    perm = torch.randperm(vocab, generator=torch.Generator().manual_seed(seed)).tolist()
    with torch.no_grad():
        model.model.embed_tokens.weight.copy_(torch.eye(vocab) * 4.0)
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        head = torch.randn(vocab, vocab, generator=torch.Generator().manual_seed(seed + 1)) * 0.1
        head[torch.tensor(perm), torch.arange(vocab)] = 5.0  # logits[perm[x]] high when input is x
        model.lm_head.weight.copy_(head)
    return model, perm


def copy_drafter(target: CausalLM, perm: list[int]) -> Eagle3Drafter:
    """An EAGLE-3 drafter that predicts the bigram target exactly at every tree depth.

    fc maps the low feature (= one-hot of token x_j) to one-hot(perm[x_j]); the MLP applies
    perm once more (one SiLU-gated unit per token), so the output encodes perm[perm[x_j]] =
    x_{j+2} at step 0 and advances one token per later step; lm_head reads the one-hot."""
    v = target.config.vocab_size
    cfg = Eagle3Config.for_target(target.config, draft_vocab_size=v, aux_layers=AUX,
                                  intermediate_size=v)
    d = Eagle3Drafter(cfg, target.get_input_embeddings())
    p = torch.zeros(v, v)
    p[torch.tensor(perm), torch.arange(v)] = 1.0  # p @ onehot(x) = onehot(perm[x])
    with torch.no_grad():
        for prm in d.parameters():
            prm.zero_()
        d.midlayer.hidden_norm.fill_(1.0)
        d.midlayer.input_layernorm.fill_(1.0)
        d.midlayer.post_attention_layernorm.fill_(1.0)
        d.norm.fill_(1.0)
        d.fc.weight[:, :v].copy_(p)  # [H, 3H]: only the low feature
        d.midlayer.mlp.gate_proj.weight.copy_(torch.eye(v) * 3.0)
        d.midlayer.mlp.up_proj.weight.copy_(torch.eye(v))
        # unit x fires ~ (3*sqrt(v)) * sqrt(v) when h = onehot(x): move that mass to perm[x]
        fire = 3.0 * v
        d.midlayer.mlp.down_proj.weight.copy_((p - torch.eye(v)) * 6.0 / fire)
        d.lm_head.weight.copy_(torch.eye(v))
    d.set_vocab_mapping(torch.zeros(v, dtype=torch.long), torch.ones(v, dtype=torch.bool))
    return d.eval().requires_grad_(False)


def make_engine(target: CausalLM, drafters: dict[str, Eagle3Drafter], tree: TreeConfig,
                policy: str = "normalhedge", aux: tuple[int, int, int] = AUX,
                selector: SelectorConfig | None = None) -> SpecEngine:
    cfg = EngineConfig(tree=tree, selector=selector or SelectorConfig(policy=policy),
                       max_context=480)
    return SpecEngine(Target(target, None, aux), drafters, cfg)


def bigram_setup(tree: TreeConfig, randoms: int) -> tuple[CausalLM, SpecEngine]:
    """A bigram target and an engine over `randoms` random drafters plus one that copies the
    target (so learners have a clear best drafter to find)."""
    target, perm = bigram_target(vocab=32)
    drafters = {f"r{i}": random_drafter(target, draft_vocab=24, seed=i) for i in range(randoms)}
    drafters["copy"] = copy_drafter(target, perm)
    return target, make_engine(target, drafters, tree)


def hf_greedy(target: CausalLM, prompt: list[int], n: int) -> list[int]:
    ids = torch.tensor([prompt])
    out = target.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n,
                          min_new_tokens=n, do_sample=False, eos_token_id=None, pad_token_id=0)
    return out[0, len(prompt):].tolist()


def fresh_noise(gen: torch.Generator) -> PositionNoise:
    """A sampled request's noise with a seed drawn from `gen`: one independent draw of a
    verification per call (tests of the sampling rule's law)."""
    return PositionNoise(int(torch.randint(0, 2**62, (), generator=gen)))
