"""Target rollouts: the target's own responses to the domains' training prompts.

EAGLE-3 drafters learn to predict the target, not the dataset, so (as SpecForge's
`regenerate_train_data`) the drafters are trained on what the target itself generates.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from tqdm import tqdm
from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

from demo.records import Record, cap_prompt, user_turn


@dataclass(frozen=True)
class Rollout:
    domain: str
    prompt_ids: tuple[int, ...]  # rendered chat prefix, ending with the assistant header
    response_ids: tuple[int, ...]  # generated tokens, ending with <|end|> when the target stopped
    rank: int = 0  # position of the prompt in its domain's seeded order

    @property
    def ids(self) -> list[int]:
        return [*self.prompt_ids, *self.response_ids]


def encode_prompt(tokenizer: PreTrainedTokenizerFast, prompt: str, max_chars: int) -> list[int]:
    """Chat-formatted prompt ids (same text as `apply_chat_template(..., add_generation_prompt=True)`)."""
    return tokenizer(user_turn(cap_prompt(prompt, max_chars)))["input_ids"]


def _trim(generated: list[int], eos_id: int, pad_id: int) -> tuple[int, ...]:
    """Cut after the first eos; drop right padding."""
    out: list[int] = []
    for t in generated:
        if t == eos_id:
            out.append(t)
            break
        if t != pad_id:
            out.append(t)
    return tuple(out)


@torch.no_grad()
def _generate_batch(
    model: LlamaForCausalLM,
    prompts: Sequence[list[int]],
    *,
    max_new_tokens: int,
    temperature: float,
    pad_id: int,
    eos_id: int,
) -> list[tuple[int, ...]]:
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, p in enumerate(prompts):  # left padding keeps every prompt's last token aligned
        ids[i, width - len(p) :] = torch.tensor(p)
        mask[i, width - len(p) :] = 1
    ids, mask = ids.to(model.device), mask.to(model.device)
    sampling = {"do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0}
    out = model.generate(
        input_ids=ids,
        attention_mask=mask,
        max_new_tokens=max_new_tokens,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
        **(sampling if temperature > 0 else {"do_sample": False}),
    )
    return [_trim(row[width:].tolist(), eos_id, pad_id) for row in out]


def generate_rollouts(
    model: LlamaForCausalLM,
    tokenizer: PreTrainedTokenizerFast,
    records: Sequence[Record],
    *,
    ranks: Sequence[int],
    prompt_chars: int,
    max_new_tokens: int,
    temperature: float,
    batch_size: int,
    seed: int,
) -> list[Rollout]:
    """One rollout per record (greedy when temperature == 0), in the order of `records`.

    Prompts are batched by length so that little compute goes to padding; each batch reseeds
    the sampler, so the result does not depend on timing or on other batches.
    """
    encoded = [encode_prompt(tokenizer, r.prompt, prompt_chars) for r in records]
    order = sorted(range(len(records)), key=lambda i: len(encoded[i]))
    responses: dict[int, tuple[int, ...]] = {}
    batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    for b, batch in enumerate(tqdm(batches, desc=f"rollouts T={temperature}", unit="batch")):
        torch.manual_seed(seed * 100_003 + b)
        outs = _generate_batch(
            model,
            [encoded[i] for i in batch],
            max_new_tokens=max_new_tokens,
            temperature=temperature,
            pad_id=tokenizer.pad_token_id,
            eos_id=tokenizer.eos_token_id,
        )
        responses.update(zip(batch, outs, strict=True))
    return [
        Rollout(r.domain, tuple(encoded[i]), responses[i], ranks[i]) for i, r in enumerate(records)
    ]
