"""Optional cache of the expensive, upstream build stages (target, rollouts).

Each entry is stored with a key hashing everything it depends on (data files, the relevant
config sections, the seed), so a stale entry is never reused. Without a cache directory every
call misses and nothing is written.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any, cast

import torch
from transformers import AutoTokenizer, LlamaForCausalLM, PreTrainedTokenizerFast

from demo.build_config import BuildConfig
from demo.rollouts import Rollout


def _digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def data_digest(data_dir: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(data_dir.rglob("*.jsonl")):
        h.update(path.relative_to(data_dir).as_posix().encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


class StageCache:
    def __init__(self, root: Path | None, cfg: BuildConfig, seed: int, data_dir: Path) -> None:
        self.root = Path(root) if root else None
        self.hits: list[str] = []
        if self.root is None:
            self.target_key = self.rollout_key = ""
            return
        base = {
            "data": data_digest(data_dir),
            "seed": seed,
            "vocab": cfg.vocab_size,
            "corpus_records": cfg.corpus_records,
        }
        self.target_key = _digest({**base, "target": asdict(cfg.target)})
        self.rollout_key = _digest({"target": self.target_key, "rollouts": asdict(cfg.rollouts)})

    def _dir(self, name: str, key: str) -> Path | None:
        return self.root / f"{name}-{key}" if self.root else None

    def load_tokenizer(self) -> PreTrainedTokenizerFast | None:
        path = self._dir("target", self.target_key)
        if path is None or not (path / "losses.json").exists():
            return None
        self.hits.append("tokenizer")
        return cast(PreTrainedTokenizerFast, AutoTokenizer.from_pretrained(str(path)))

    def load_target(self, device: str) -> tuple[LlamaForCausalLM, list[float]] | None:
        path = self._dir("target", self.target_key)
        if path is None or not (path / "losses.json").exists():
            return None
        model = LlamaForCausalLM.from_pretrained(str(path), dtype=torch.float32)
        torch.nn.Module.to(model, device)
        self.hits.append("target")
        return model.eval(), json.loads((path / "losses.json").read_text())

    def save_target(
        self, model: LlamaForCausalLM, tokenizer: PreTrainedTokenizerFast, losses: list[float]
    ) -> None:
        path = self._dir("target", self.target_key)
        if path is None:
            return
        model.save_pretrained(str(path))
        tokenizer.save_pretrained(str(path))
        (path / "losses.json").write_text(json.dumps(losses))  # written last: marks completion

    def load_rollouts(self) -> list[Rollout] | None:
        path = self._dir("rollouts", self.rollout_key)
        if path is None or not (path / "rollouts.json").exists():
            return None
        self.hits.append("rollouts")
        rows = json.loads((path / "rollouts.json").read_text())
        return [
            Rollout(r["domain"], tuple(r["prompt_ids"]), tuple(r["response_ids"]), r["rank"])
            for r in rows
        ]

    def save_rollouts(self, rollouts: list[Rollout]) -> None:
        path = self._dir("rollouts", self.rollout_key)
        if path is None:
            return
        path.mkdir(parents=True, exist_ok=True)
        rows = [asdict(r) for r in rollouts]
        (path / "rollouts.json").write_text(json.dumps(rows))
