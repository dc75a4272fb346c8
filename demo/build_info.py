"""The `build` section of report.json: what was trained, how long each stage took."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import Any, cast

import torch
from transformers import LlamaForCausalLM

from core.model.eagle3 import Eagle3Drafter
from core.provision import smollm2
from demo.build_config import BuildConfig
from demo.rollouts import Rollout
from demo.train_drafters import TrainLog, response_token_counts


def draft_vocab_coverage(drafter: Eagle3Drafter, rollouts: Sequence[Rollout]) -> float:
    """Share of all generated tokens that the draft vocabulary can propose."""
    counts = response_token_counts(rollouts, drafter.cfg.vocab_size)
    t2d = cast(torch.Tensor, drafter.t2d).cpu()
    return round(float(counts[t2d].sum() / counts.sum().clamp(min=1)), 4)


def log_summary(log: TrainLog) -> dict[str, Any]:
    tail = log.losses[-25:]
    return {
        "steps": len(log.losses),
        "first_loss": round(log.losses[0], 4),
        "final_loss": round(sum(tail) / len(tail), 4),
        "final_acc_by_step": [round(a, 4) for a in log.acc[-1]] if log.acc else [],
    }


def rollout_counts(rollouts: Sequence[Rollout]) -> dict[str, dict[str, int]]:
    """Rollouts by sampling temperature and by the precision that generated them."""
    temps = sorted({r.temperature for r in rollouts})
    dtypes = sorted({r.dtype for r in rollouts})
    return {"by_temperature": {str(t): sum(r.temperature == t for r in rollouts) for t in temps},
            "by_dtype": {d.removeprefix("torch.") or "unknown": sum(r.dtype == d for r in rollouts)
                         for d in dtypes}}


def rollout_summary(rollouts: Sequence[Rollout], eos_id: int,
                    generalist: Eagle3Drafter) -> dict[str, Any]:
    return {
        "sequences": len(rollouts),
        **rollout_counts(rollouts),
        "prompt_tokens": sum(len(r.prompt_ids) for r in rollouts),
        "response_tokens": sum(len(r.response_ids) for r in rollouts),
        "ended_with_eos": sum(bool(r.response_ids) and r.response_ids[-1] == eos_id
                              for r in rollouts),
        "draft_vocab_coverage": draft_vocab_coverage(generalist, rollouts),
    }


def build_summary(
    cfg: BuildConfig, *, quick: bool, seed: int, timer_seconds: dict[str, float],
    cached: list[str], pool_bytes: int, model: LlamaForCausalLM, rollouts: Sequence[Rollout],
    eos_id: int, generalist: Eagle3Drafter, logs: dict[str, TrainLog],
    aux_layers: tuple[int, int, int],
) -> dict[str, Any]:
    return {
        "quick": quick,
        "seed": seed,
        "threads": cfg.threads,
        "device": cfg.device,
        "cached_stages": cached,
        "stage_seconds": timer_seconds,
        "total_seconds": round(sum(timer_seconds.values()), 1),
        "pool_bytes": pool_bytes,
        "target": {
            "name": "SmolLM2-135M-Instruct",
            "source": f"{smollm2.WHEEL} ({smollm2.GGUF_FILE}, sha256 {smollm2.GGUF_SHA256})",
            "parameters": sum(p.numel() for p in model.parameters()),
            "layers": model.config.num_hidden_layers,
            "dtype": str(model.dtype).removeprefix("torch."),
            "aux_layers": list(aux_layers),
        },
        "rollouts": rollout_summary(rollouts, eos_id, generalist),
        "drafters": {k: log_summary(v) for k, v in logs.items()},
        "config": asdict(cfg),
    }
