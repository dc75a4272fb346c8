"""Target rollouts: the target's own responses to the domains' training prompts.

EAGLE-3 drafters learn to predict the target, not the dataset, so (as SpecForge's
`regenerate_train_data`) the drafters are trained on what the target itself generates, greedy
and sampled. Rollouts are small (token ids only), so the shipped ones are committed under
`demo/data/rollouts/` with the key of everything they depend on: a drafter rebuild with the
same target, prompts and settings reuses them instead of spending the build's longest stage.
Each rollout also records the precision of the target passes that made it (`dtype`): that is
provenance, not part of the key, so a build computing in fp32 (a CPU without native bf16)
reuses rollouts made in bf16 instead of regenerating all of them (~2 hours in fp32), and can
add its own to the same file.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm
from transformers import LlamaForCausalLM, PreTrainedTokenizerBase

from demo.records import Record, cap_prompt


@dataclass(frozen=True)
class Rollout:
    domain: str
    record_id: str
    temperature: float
    prompt_ids: tuple[int, ...]  # rendered chat prefix, ending with the assistant header
    response_ids: tuple[int, ...]  # generated tokens, ending with EOS when the target stopped
    rank: int = 0  # position of the prompt in its domain's seeded order
    dtype: str = ""  # precision of the target passes that generated it, e.g. "torch.bfloat16"

    @property
    def ids(self) -> list[int]:
        return [*self.prompt_ids, *self.response_ids]


@dataclass(frozen=True)
class Stored:
    """A stored response and the precision it was generated in."""

    response_ids: tuple[int, ...]
    dtype: str


# Stored responses by (record id, temperature)
Responses = dict[tuple[str, float], Stored]


@dataclass(frozen=True)
class PromptJob:
    record: Record
    rank: int
    temperature: float


def encode_prompt(tokenizer: PreTrainedTokenizerBase, prompt: str, max_chars: int) -> list[int]:
    """A user prompt rendered with the target's own chat template, as the gateway renders it."""
    messages = [{"role": "user", "content": cap_prompt(prompt, max_chars)}]
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return list(tokenizer(str(text), add_special_tokens=False)["input_ids"])


def _trim(generated: list[int], eos_id: int) -> tuple[int, ...]:
    """Cut after the first EOS (pad = EOS for SmolLM2, so nothing else needs dropping)."""
    return tuple(generated[: generated.index(eos_id) + 1] if eos_id in generated else generated)


@torch.no_grad()
def _generate_batch(
    model: LlamaForCausalLM, prompts: Sequence[list[int]], *, max_new_tokens: int,
    temperature: float, eos_id: int,
) -> list[tuple[int, ...]]:
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), eos_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, p in enumerate(prompts):  # left padding keeps every prompt's last token aligned
        ids[i, width - len(p) :] = torch.tensor(p)
        mask[i, width - len(p) :] = 1
    sampling = {"do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0}
    out = model.generate(
        input_ids=ids.to(model.device), attention_mask=mask.to(model.device),
        max_new_tokens=max_new_tokens, eos_token_id=eos_id, pad_token_id=eos_id,
        **(sampling if temperature > 0 else {"do_sample": False}),
    )
    return [_trim(row[width:].tolist(), eos_id) for row in out]


def generate_rollouts(
    model: LlamaForCausalLM, tokenizer: PreTrainedTokenizerBase, jobs: Sequence[PromptJob], *,
    prompt_chars: int, max_new_tokens: int, batch_size: int, seed: int,
) -> list[Rollout]:
    """One rollout per job (greedy when its temperature is 0), in the order of `jobs`.

    Jobs are batched by temperature and prompt length so that little compute goes to padding;
    each batch reseeds the sampler, so the result does not depend on timing."""
    eos = int(tokenizer.eos_token_id)
    encoded = [encode_prompt(tokenizer, j.record.prompt, prompt_chars) for j in jobs]
    order = sorted(range(len(jobs)), key=lambda i: (jobs[i].temperature, len(encoded[i])))
    batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    responses: dict[int, tuple[int, ...]] = {}
    for b, batch in enumerate(tqdm(batches, desc="rollouts", unit="batch")):
        temps = {jobs[i].temperature for i in batch}
        for temperature in sorted(temps):  # a batch straddling two temperatures splits
            part = [i for i in batch if jobs[i].temperature == temperature]
            torch.manual_seed(seed * 100_003 + b)
            outs = _generate_batch(model, [encoded[i] for i in part], max_new_tokens=max_new_tokens,
                                   temperature=temperature, eos_id=eos)
            responses.update(zip(part, outs, strict=True))
    dtype = str(model.dtype)
    return [
        Rollout(j.record.domain, j.record.id, j.temperature, tuple(encoded[i]), responses[i],
                j.rank, dtype)
        for i, j in enumerate(jobs)
    ]


def save_rollouts(path: Path, rollouts: Sequence[Rollout], key: dict[str, Any]) -> None:
    """One JSON line per rollout (prompt ids are re-rendered on load), the key on line one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        f.write(json.dumps({"key": key}, sort_keys=True) + "\n")
        for r in rollouts:
            row = {k: v for k, v in asdict(r).items() if k != "prompt_ids"}
            f.write(json.dumps(row, separators=(",", ":")) + "\n")


def stored_responses(path: Path | None, key: dict[str, Any]) -> Responses:
    """The responses stored in `path` by (record id, temperature); empty when the file is
    absent or its key differs (another target, corpus, seed or generation setting). A file
    written before rollouts carried their dtype has it in its key: its lines get that one."""
    if path is None or not path.is_file():
        return {}
    lines = path.read_text(encoding="utf-8").splitlines()
    stored_key = dict(json.loads(lines[0]).get("key") or {}) if lines else {}
    legacy_dtype = str(stored_key.pop("dtype", ""))
    if not lines or stored_key != json.loads(json.dumps(key, sort_keys=True)):
        return {}
    rows = (json.loads(line) for line in lines[1:])
    return {(r["record_id"], float(r["temperature"])):
            Stored(tuple(r["response_ids"]), r.get("dtype", legacy_dtype)) for r in rows}


def load_rollouts(
    path: Path, key: dict[str, Any], jobs: Sequence[PromptJob], tokenizer: PreTrainedTokenizerBase,
    prompt_chars: int,
) -> list[Rollout] | None:
    """The stored rollouts of these jobs, or None when the file is stale or lacks one of them.

    A rollout depends on its prompt and the generation settings, not on how many prompts a
    build asks for, so a file made for fewer or more prompts per domain still serves the jobs
    it holds (`extend_rollouts` generates only the missing ones)."""
    stored = stored_responses(path, key)
    if any((j.record.id, j.temperature) not in stored for j in jobs):
        return None
    return [_rollout(j, stored[(j.record.id, j.temperature)], tokenizer, prompt_chars)
            for j in jobs]


def _rollout(job: PromptJob, stored: Stored, tokenizer: PreTrainedTokenizerBase,
             prompt_chars: int) -> Rollout:
    prompt = tuple(encode_prompt(tokenizer, job.record.prompt, prompt_chars))
    return Rollout(job.record.domain, job.record.id, job.temperature, prompt,
                   stored.response_ids, job.rank, stored.dtype)


def extend_rollouts(
    model: LlamaForCausalLM, tokenizer: PreTrainedTokenizerBase, jobs: Sequence[PromptJob],
    stored: Responses, *, prompt_chars: int, max_new_tokens: int, batch_size: int, seed: int,
) -> list[Rollout]:
    """The rollouts of `jobs` in order: stored responses reused (with the dtype they were made
    in), only the missing generated."""
    missing = [j for j in jobs if (j.record.id, j.temperature) not in stored]
    fresh = generate_rollouts(model, tokenizer, missing, prompt_chars=prompt_chars,
                              max_new_tokens=max_new_tokens, batch_size=batch_size,
                              seed=seed) if missing else []
    found = {**stored,
             **{(r.record_id, r.temperature): Stored(r.response_ids, r.dtype) for r in fresh}}
    return [_rollout(j, found[(j.record.id, j.temperature)], tokenizer, prompt_chars) for j in jobs]
