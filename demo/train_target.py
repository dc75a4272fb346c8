"""Train the demo target: a small Llama causal LM on the chat-formatted corpora of all domains."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor
from tqdm import tqdm
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from demo.precision import train_autocast


@dataclass(frozen=True)
class TargetSpec:
    """Shape of the target and its training run (a fixed step count, so runs are reproducible)."""

    hidden_size: int = 256
    num_layers: int = 6
    num_heads: int = 4
    num_kv_heads: int = 4
    intermediate_size: int = 768
    max_positions: int = 512
    seq_len: int = 256
    batch_size: int = 16
    steps: int = 1000
    lr: float = 3e-3
    warmup_steps: int = 50
    weight_decay: float = 0.1


def target_config(spec: TargetSpec, tokenizer: PreTrainedTokenizerFast) -> LlamaConfig:
    return LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_layers,
        num_attention_heads=spec.num_heads,
        num_key_value_heads=spec.num_kv_heads,
        max_position_embeddings=spec.max_positions,
        rms_norm_eps=1e-5,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )


def pack_windows(docs: Sequence[Sequence[int]], seq_len: int, generator: torch.Generator) -> Tensor:
    """Shuffle documents, concatenate them and cut the stream into [N, seq_len] windows.

    Packing wastes no compute on padding; each document ends with `<|end|>`, so the model
    learns where conversations stop.
    """
    order = torch.randperm(len(docs), generator=generator).tolist()
    stream = torch.tensor([t for i in order for t in docs[i]], dtype=torch.long)
    n = len(stream) // seq_len
    return stream[: n * seq_len].view(n, seq_len)


def lr_at(step: int, spec: TargetSpec) -> float:
    """Linear warm-up, then cosine decay to a tenth of the peak."""
    if step < spec.warmup_steps:
        return spec.lr * (step + 1) / spec.warmup_steps
    progress = (step - spec.warmup_steps) / max(1, spec.steps - spec.warmup_steps)
    return spec.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


def _batches(docs: Sequence[Sequence[int]], spec: TargetSpec, generator: torch.Generator):
    """Endless [B, seq_len] batches, reshuffled every epoch."""
    while True:
        windows = pack_windows(docs, spec.seq_len, generator)
        windows = windows[torch.randperm(len(windows), generator=generator)]
        for i in range(0, len(windows) - spec.batch_size + 1, spec.batch_size):
            yield windows[i : i + spec.batch_size]


def _optimizer(model: LlamaForCausalLM, spec: TargetSpec) -> torch.optim.Optimizer:
    """AdamW; no weight decay on norms (1-D parameters)."""
    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [
        {"params": decay, "weight_decay": spec.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=spec.lr, betas=(0.9, 0.95), eps=1e-8)


def train_target(
    docs: Sequence[Sequence[int]],
    tokenizer: PreTrainedTokenizerFast,
    spec: TargetSpec,
    seed: int,
    device: str = "cpu",
) -> tuple[LlamaForCausalLM, list[float]]:
    """Train from scratch for `spec.steps` steps; returns the model and the per-step losses."""
    torch.manual_seed(seed)
    model = LlamaForCausalLM(target_config(spec, tokenizer))
    torch.nn.Module.to(model, device)  # in place; transformers' typed `to` wrapper confuses mypy
    model.train()
    opt = _optimizer(model, spec)
    batches = _batches(docs, spec, torch.Generator().manual_seed(seed))
    losses: list[float] = []
    bar = tqdm(range(spec.steps), desc="target", unit="step")
    for step in bar:
        for group in opt.param_groups:
            group["lr"] = lr_at(step, spec)
        batch = next(batches).to(device)
        with train_autocast(device):  # bf16 on CUDA, fp32 on CPU (see demo.precision)
            loss = model(input_ids=batch, labels=batch).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        if step % 10 == 0:
            bar.set_postfix(loss=f"{sum(losses[-20:]) / len(losses[-20:]):.3f}")
    model.eval()
    return model, losses


@torch.no_grad()
def mean_loss(model: LlamaForCausalLM, docs: Sequence[Sequence[int]], max_len: int) -> float:
    """Token-weighted mean next-token loss (nats) over documents truncated to `max_len`."""
    total, count = 0.0, 0
    for doc in docs:
        ids = torch.tensor([list(doc[:max_len])], device=model.device)
        if ids.shape[1] < 2:
            continue
        loss = model(input_ids=ids, labels=ids).loss
        total += loss.item() * (ids.shape[1] - 1)
        count += ids.shape[1] - 1
    return total / max(1, count)
