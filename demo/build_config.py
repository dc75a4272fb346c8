"""Every knob of the demo build in one frozen object, with the full and the quick presets.

The full preset is sized for the 45-minute budget on two CPU cores: the from-scratch build of
the shipped pool took 35 minutes (stage times in `demo/pool/REPORT.md`); the quick preset
exercises the same code in seconds.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields, is_dataclass, replace
from typing import Any

from demo.report import ReportSpec
from demo.train_drafters import DrafterSpec, Schedule
from demo.train_target import TargetSpec


@dataclass(frozen=True)
class RolloutSpec:
    prompts_per_domain: int = 300  # training prompts per domain
    generalist_per_domain: int = 150  # the generalist's mixture; specialists use all of theirs
    prompt_chars: int = 400  # prompts keep head and tail (see records.cap_prompt)
    max_new_tokens: int = 64  # as long as the report's responses
    temperatures: tuple[float, ...] = (0.0,)  # one rollout per prompt and temperature
    batch_size: int = 64


@dataclass(frozen=True)
class BuildConfig:
    vocab_size: int = 2048
    corpus_records: int | None = None  # per domain for tokenizer and target; None = all
    # 6 layers x 192 wide (3.3 M parameters), 2000 steps of 8 x 256 tokens (~1.1 epochs): 18 of
    # the build's 35 minutes on two AVX2 cores (budget 45). At this compute a narrower model that sees more
    # tokens reaches a lower loss than a wider one that sees fewer (256 wide: loss 4.1 after
    # 900 steps in the same time, and greedy loops that every drafter predicts alike).
    target: TargetSpec = field(
        default_factory=lambda: TargetSpec(
            hidden_size=192, num_layers=6, num_heads=4, num_kv_heads=4, intermediate_size=576,
            batch_size=8, steps=2000, warmup_steps=60,
        )
    )
    heldout_records: int = 40  # per domain, for the target's held-out loss
    rollouts: RolloutSpec = field(default_factory=RolloutSpec)
    drafter: DrafterSpec = field(default_factory=DrafterSpec)
    generalist: Schedule = field(default_factory=lambda: Schedule(steps=400, lr=2e-3, warmup_steps=25))
    specialist: Schedule = field(default_factory=lambda: Schedule(steps=100, lr=1.5e-3, warmup_steps=8))
    report: ReportSpec = field(default_factory=ReportSpec)  # tree (4, 6, 24): see ReportSpec
    eval_prompts_per_domain: int = 30
    threads: int = 2
    report_workers: int = 2  # single-threaded engine processes measuring the MAT table
    device: str = "cpu"  # the documented build is CPU; "cuda" only speeds up experiments


def aux_layers_for(num_layers: int) -> tuple[int, int, int]:
    """Distinct low/mid/high capture layers (input of decoder layer idx): 6 layers -> (1, 3, 4),
    8 -> (2, 4, 6).

    EAGLE-3's (2, L//2, L-3) assumes deep targets; for L = 6..8 it repeats or crowds layers.
    """
    mid = num_layers // 2
    low = max(1, num_layers // 4)
    high = min(num_layers - 1, max(mid + 1, num_layers - 2))
    if not 0 < low < mid < high < num_layers:
        raise ValueError(f"a target needs at least 4 layers for three distinct aux layers, got {num_layers}")
    return (low, mid, high)


FULL = BuildConfig()

QUICK = BuildConfig(
    vocab_size=384,
    corpus_records=60,
    target=TargetSpec(
        hidden_size=64, num_layers=4, num_heads=2, num_kv_heads=2, intermediate_size=128,
        max_positions=256, seq_len=64, batch_size=8, steps=20, warmup_steps=5,
    ),
    heldout_records=2,
    rollouts=RolloutSpec(
        prompts_per_domain=6, generalist_per_domain=4, prompt_chars=160, max_new_tokens=12, batch_size=8
    ),
    drafter=replace(DrafterSpec(), draft_vocab_size=128, intermediate_size=64, ttt_steps=3, batch_size=4),
    generalist=Schedule(steps=6, lr=2e-3, warmup_steps=2),
    specialist=Schedule(steps=2, lr=1e-3, warmup_steps=1),
    report=ReportSpec(top_k=2, depth=2, total_tokens=4, max_new_tokens=8, prompts_per_domain=1),
    eval_prompts_per_domain=2,
    threads=1,
    report_workers=1,
)


def with_overrides(cfg: BuildConfig, items: list[str]) -> BuildConfig:
    """Apply `section.field=value` overrides (values parsed as JSON, else kept as strings),
    e.g. `specialist.steps=300` or `rollouts.temperatures=[0.0, 0.7]`."""
    for item in items:
        key, _, raw = item.partition("=")
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        cfg = _replace_path(cfg, key.split("."), value)
    return cfg


def _replace_path(obj: Any, path: list[str], value: Any) -> Any:
    if not is_dataclass(obj) or path[0] not in {f.name for f in fields(obj)}:
        raise ValueError(f"unknown build setting {'.'.join(path)!r}")
    if len(path) == 1:
        current = getattr(obj, path[0])
        value = tuple(value) if isinstance(current, tuple) else value
        return replace(obj, **{path[0]: value})  # type: ignore[type-var]
    return replace(obj, **{path[0]: _replace_path(getattr(obj, path[0]), path[1:], value)})  # type: ignore[type-var]
