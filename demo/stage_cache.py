"""The build's stage cache: rollout chunks and trained drafters, so a build resumes.

Every entry lives under a key hashing everything it depends on (the target file, the data,
the config sections, the seed), so a stale entry is never reused. Without a cache directory
every lookup misses and nothing is written.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any, cast

import torch
from transformers import LlamaForCausalLM

from core.model.eagle3 import Eagle3Drafter, load_drafter, save_drafter
from core.provision import smollm2
from demo.build_config import BuildConfig
from demo.domains import DOMAINS, corpus_path
from demo.train_drafters import TrainLog


def _digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def corpora_digest(data_dir: Path) -> str:
    h = hashlib.sha256()
    for domain in DOMAINS:
        h.update(domain.encode())
        h.update(corpus_path(domain, data_dir).read_bytes())
    return h.hexdigest()[:16]


_COUNTS = ("greedy_per_domain", "domain_greedy", "sampled_per_domain", "general_greedy",
           "general_sampled_every", "generalist_per_domain", "batch_size")


def rollout_key(cfg: BuildConfig, seed: int, data_dir: Path) -> dict[str, Any]:
    """What one rollout depends on; stored with the rollouts and compared on load. How many
    prompts a build answers is not part of it: a larger build reuses a smaller one's rollouts;
    nor is the precision of the passes that made it, which each rollout records instead
    (demo/rollouts.py)."""
    settings = {k: v for k, v in asdict(cfg.rollouts).items() if k not in _COUNTS}
    return {"target": smollm2.GGUF_SHA256[:16], "corpora": corpora_digest(data_dir),
            "seed": seed, "rollouts": settings}


class StageCache:
    def __init__(self, root: Path | None, cfg: BuildConfig, seed: int, data_dir: Path) -> None:
        self.root = Path(root) if root else None
        self.hits: list[str] = []
        self.logs: dict[str, TrainLog] = {}
        key = {"corpora": corpora_digest(data_dir), "seed": seed, "target": smollm2.GGUF_SHA256,
               "config": {k: v for k, v in asdict(cfg).items()
                          if k not in ("report", "report_workers", "router_per_domain")}}
        self.key = _digest(key)

    def path(self, name: str) -> Path | None:
        return self.root / f"build-{self.key}" / name if self.root else None

    def load_drafter(self, drafter_id: str, target: LlamaForCausalLM) -> Eagle3Drafter | None:
        path = self.path(f"drafters/{drafter_id}")
        if path is None or not (path / "log.json").is_file():
            return None
        embed = cast(torch.nn.Embedding, target.get_input_embeddings())
        drafter = load_drafter(path, embed_tokens=embed,
                               dtype=torch.float32, device=target.device)
        log = json.loads((path / "log.json").read_text())
        self.logs[drafter_id] = TrainLog(log["losses"], log["acc"])
        self.hits.append(f"drafter {drafter_id}")
        return drafter

    def save_drafter(self, drafter_id: str, drafter: Eagle3Drafter) -> None:
        path = self.path(f"drafters/{drafter_id}")
        if path is None:
            return
        save_drafter(drafter, path, dtype=torch.float32)
        log = self.logs[drafter_id]
        (path / "log.json").write_text(json.dumps({"losses": log.losses, "acc": log.acc}))
