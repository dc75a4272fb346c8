"""Every knob of the demo build in one frozen object, with the full and the quick presets.

The target is fixed (SmolLM2-135M-Instruct, `core/provision/smollm2.py`); the build makes its
rollouts and trains the eight drafters. Sizes are chosen for the 150-minute budget on two CPU cores
(stage times of the shipped build are in `demo/pool/REPORT.md`); the quick preset runs the same
code in minutes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields, is_dataclass, replace
from typing import Any

from demo.domains import DOMAINS
from demo.report import ReportSpec
from demo.train_drafters import DrafterSpec, Schedule


@dataclass(frozen=True)
class RolloutSpec:
    # 640 + 160 a domain (news has 422 training prompts, all used): 5x the 112 + 48 of the
    # previous pool, which lifted in-domain specialist MAT by 5% (demo/experiments/rollouts-5x.md)
    greedy_per_domain: int = 640  # training prompts per domain answered greedily
    # Domains answering another number of prompts greedily (at most their corpus's size).
    # Medical, the specialist furthest from 1.2x its domain at 640 (1.18x; 8 epochs on the same
    # data gained nothing, demo/experiments/more-epochs.md), answers all 2,000 of its prompts
    # (demo/experiments/medical-all-prompts.md).
    domain_greedy: dict[str, int] = field(default_factory=lambda: {"medical": 2000})
    sampled_per_domain: int = 160  # the first of them answered once more at temperature 1
    # The generalist's data, the paper's regime: the synthesised general chat
    # (`demo/general_chat.py`: the first general_greedy prompts answered greedily, every n-th
    # once more at temperature 1) plus an equal small share of every domain (the first prompts
    # of each, both temperatures).
    general_greedy: int = 320
    general_sampled_every: int = 4
    generalist_per_domain: int = 8
    prompt_chars: int = 600  # prompts keep head and tail (see records.cap_prompt)
    max_new_tokens: int = 96
    batch_size: int = 32


@dataclass(frozen=True)
class BuildConfig:
    rollouts: RolloutSpec = field(default_factory=RolloutSpec)
    drafter: DrafterSpec = field(default_factory=DrafterSpec)
    # On the previous pool's 1x rollouts, 4 epochs at lr 1e-3 left the generalist at 33% top-1
    # agreement; 10 at 2e-3 (kept) reached 70%; 20 reached 86% but left held-out MAT where it
    # was (demo/experiments/epochs-20-14.md): the drafters are limited by target-labelled
    # tokens, not by steps, hence 5x the rollouts.
    generalist: Schedule = field(default_factory=lambda: Schedule(epochs=10.0, lr=2e-3,
                                                                  warmup_steps=20))
    # "generalist" (the shipped pool): each specialist is a fine-tuned copy of the generalist,
    # which keeps what the generalist knows, so it rarely loses outside its domain; "scratch":
    # a fresh drafter with its own domain's draft vocabulary trained on that domain only, weak
    # elsewhere but, on ~13k generated tokens a domain, also weaker in it
    # (demo/experiments/scratch-specialists.md).
    specialist_init: str = "generalist"
    # 3 epochs at 2e-3 over 47k-75k generated tokens a domain.
    specialist: Schedule = field(default_factory=lambda: Schedule(epochs=3.0, lr=2e-3,
                                                                  warmup_steps=5))
    # Epochs of particular specialists, overriding specialist.epochs (JSON on the command line:
    # --set 'specialist_epochs={"medical": 8}'). News, the least trained at 3 epochs (top-1
    # agreement 0.51), gained 3.9% in-domain MAT at 8 (fp32, 9 held-out prompts); medical
    # gained nothing at 8 (137 rounds both), so it stays at 3 (demo/experiments/more-epochs.md).
    specialist_epochs: dict[str, float] = field(default_factory=lambda: {"news": 8.0})
    # 9 held-out prompts a domain: 3 under-stated the specialists by ~5% (rollouts-5x.md)
    report: ReportSpec = field(default_factory=lambda: ReportSpec(prompts_per_domain=9))
    eval_prompts_per_domain: int = 30
    # The static router baseline (demo/router.py, policy `router`): training prompts a domain.
    router_per_domain: int = 300
    threads: int = 2
    report_workers: int = 2  # single-threaded engine processes measuring the MAT tables
    # The target's forward passes (rollouts, features) run in bf16 where the CPU has native
    # bf16 (measured 1.5-2x faster), else fp32; drafter training autocasts to bf16 there too
    # (`drafter.compute_dtype`).
    target_dtype: str = "auto"
    device: str = "cpu"  # the documented build is CPU; "cuda" only speeds up experiments

    def __post_init__(self) -> None:
        # Checked here, not when the specialists start training (after features and generalist)
        if self.specialist_init not in ("generalist", "scratch"):
            raise ValueError(f"specialist_init is 'scratch' or 'generalist', got "
                             f"{self.specialist_init!r}")
        for name, per_domain in (("specialist_epochs", self.specialist_epochs),
                                 ("rollouts.domain_greedy", self.rollouts.domain_greedy)):
            unknown = sorted(set(per_domain) - set(DOMAINS))
            if unknown:
                raise ValueError(f"{name} names no domain {', '.join(unknown)} "
                                 f"(domains: {', '.join(DOMAINS)})")

    def specialist_schedule(self, domain: str) -> Schedule:
        """The training schedule of `domain`'s specialist."""
        epochs = self.specialist_epochs.get(domain, self.specialist.epochs)
        return replace(self.specialist, epochs=float(epochs))


# Drafter training uses bf16 autocast where the CPU has native bf16 (1.6x faster a step).
FULL = BuildConfig()

# The paper's specialists are trained from scratch on one domain each; as `--set` overrides of
# the full build (on the previous pool's 112 + 48 rollouts a domain), built once and not
# shipped: weaker in-domain than fine-tuned copies (demo/experiments/scratch-specialists.md).
PAPER_REGIME = [
    "rollouts.greedy_per_domain=112", "rollouts.domain_greedy={}",
    "rollouts.sampled_per_domain=48",
    "specialist_init=scratch", "specialist.epochs=12", "specialist.lr=2e-3",
]

QUICK = BuildConfig(
    rollouts=RolloutSpec(
        greedy_per_domain=3, domain_greedy={}, sampled_per_domain=1, generalist_per_domain=2,
        prompt_chars=120,
        max_new_tokens=8, batch_size=8,
        # A handful of general chat prompts, not the full build's 400: generating and featurising
        # those took 5 of a quick build's 6.5 minutes in fp32.
        general_greedy=8, general_sampled_every=4,
    ),
    drafter=replace(DrafterSpec(), draft_vocab_size=256, intermediate_size=64, ttt_steps=3,
                    batch_rows=2, row_tokens=256),
    generalist=Schedule(epochs=1.0, lr=1e-3, warmup_steps=1),
    specialist=Schedule(epochs=1.0, lr=1e-3, warmup_steps=1),
    specialist_epochs={},
    report=ReportSpec(top_k=2, depth=2, total_tokens=4, max_new_tokens=4, prompts_per_domain=1,
                      temperatures=(0.0, 1.0)),
    eval_prompts_per_domain=2,
    router_per_domain=4,
    threads=1,
    report_workers=2,  # the report's 112 tiny cells dominate a quick build: share them
)


def with_overrides(cfg: BuildConfig, items: list[str]) -> BuildConfig:
    """Apply `section.field=value` overrides (values parsed as JSON, else kept as strings),
    e.g. `specialist.epochs=2` or `report.temperatures=[0.0]`."""
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
    inner = _replace_path(getattr(obj, path[0]), path[1:], value)
    return replace(obj, **{path[0]: inner})  # type: ignore[type-var]
