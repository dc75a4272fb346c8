"""The held-out prompts every benchmark decodes: the demo pool's `eval_prompts.jsonl`
(never trained on), chat-formatted as the server would, interleaved domain by domain."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.paths import REPO

DEFAULT_POOL = REPO / "demo" / "pool" / "pool.json"


@dataclass(frozen=True)
class Prompt:
    id: str
    domain: str
    ids: list[int]


def load_prompts(pool_json: Path, tokenizer: Any, per_domain: int, max_prompt_tokens: int,
                 seed: int = 0) -> list[Prompt]:
    """Held-out prompts, chat-formatted, interleaved domain by domain (the mixed workload)."""
    path = pool_json.parent / "eval_prompts.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    by_domain: dict[str, list[dict[str, str]]] = {}
    for r in rows:
        by_domain.setdefault(r["domain"], []).append(r)
    rng = random.Random(seed)
    picked = {d: rng.sample(rs, min(per_domain, len(rs))) for d, rs in sorted(by_domain.items())}
    out = []
    for i in range(per_domain):
        for d, rs in picked.items():
            if i < len(rs):
                out.append(Prompt(rs[i]["id"], d,
                                  chat_ids(tokenizer, rs[i]["prompt"], max_prompt_tokens)))
    return out


def chat_ids(tokenizer: Any, text: str, max_tokens: int) -> list[int]:
    content = tokenizer.decode(tokenizer(text)["input_ids"][:max_tokens])
    text = tokenizer.apply_chat_template([{"role": "user", "content": content}],
                                         add_generation_prompt=True, tokenize=False)
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])
