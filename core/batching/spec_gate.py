"""Whether a step speculates or decodes plain, per batch size, chosen by measuring both in
place (EngineConfig.speculation = "auto"); "always" speculates every step.

Why. A speculative round verifies requests x (tree nodes + 1) rows in one target pass. At one
request that pass costs little more than a plain step's (memory-bound), so a round committing
MAT tokens pays; with many requests the pass becomes compute-bound and its cost grows with the
rows, while plain decoding commits one token per request for one row each. On two CPU cores
at 8 streams plain decoding ran 78-89 tokens/s against 39-47 speculating
(bench/results/verify_logits_s8.md). Where the cross-over lies depends on the machine, the
tree and the acceptance the pool reaches on the current traffic, so it is measured, not set:
vLLM's `speculative_disable_by_batch_size` is the fixed-threshold form of the same idea.

How. For each batch size (requests a round, powers of two up to 16:
core/selection/arm_costs.bucket), the first steps alternate between speculating and plain decoding
in blocks of `block` steps (the evaluation period, SelectorConfig.eval_every, so that each
speculative block holds every request's counterfactual catch-up once, as speculation pays it when
chosen), until each setting has `probe_steps`. Each setting's rate is its committed tokens over its
round time, summed over its steps, steps slower than three times its median (a stall) left out. The
gate speculates unless plain decoding was faster by more than TIE_MARGIN, and measures again every
`reprobe_every` steps of that size, since the traffic (hence MAT) drifts. While measuring, a
speculative block's first round may also score the pairs of the plain block before it (plain steps
evaluate less often, core.decoding.request.PLAIN_EVAL_STRETCH), which a memory-bound catch-up does
for about the cost of its own: so speculation is charged its usual evaluations, and plain decoding
slightly fewer than it will pay once chosen (one per PLAIN_EVAL_STRETCH blocks).

Lossless either way: a plain step is a round whose tree is the root alone, so greedy output
and the sampled distribution are the target's. What stops is only the drafting: HedgeSpec's
full-information learners keep learning in plain steps (every drafter is still scored on the
verified tokens, core/decoding/request_round.py), bandit policies learn nothing there (they need a
draft). A seeded sampled request drafts even in a plain step (core/batching/step.py): a plain step
consumes its random stream differently, and its sample must not depend on the gate's timing.
"""

from __future__ import annotations

import logging
import statistics
from dataclasses import dataclass, field

from core.batching.ab_trial import ABTrial
from core.selection.arm_costs import bucket

log = logging.getLogger(__name__)

PROBE_STEPS = 16  # measured steps per setting before choosing (rounded up to whole blocks)
REPROBE_EVERY = 1024  # steps of one batch size between two measurements
# Plain decoding must beat speculation by this much to turn it off: both rates carry this VM's
# 5-10% noise, and a speculating step also shows the learner the drafts' realised acceptance.
TIE_MARGIN = 0.05
STALL = 3.0  # a step slower than STALL x its setting's median is left out of its rate


def _speculation_pays(steps: dict[bool, list[tuple[int, float]]]) -> bool:
    rates = _rates(steps)
    return rates["speculative"] >= (1.0 - TIE_MARGIN) * rates["plain"]


def _rates(steps: dict[bool, list[tuple[int, float]]]) -> dict[str, float]:
    """Tokens per second of round time, per setting measured so far."""
    return {("speculative" if k else "plain"): _rate(v) for k, v in steps.items() if v}


def _rate(steps: list[tuple[int, float]]) -> float:
    cap = STALL * statistics.median(s for _, s in steps)
    kept = [(t, s) for t, s in steps if s <= cap]
    seconds = sum(s for _, s in kept)
    return sum(t for t, _ in kept) / seconds if seconds > 0 else 0.0


@dataclass
class SpecGate:
    """The setting of the next step (`speculate(requests)`) and what the steps measured
    (`record`), per batch size."""

    mode: str  # "auto" or "always" (EngineConfig.speculation)
    block: int = 1  # steps per alternation block while measuring (SelectorConfig.eval_every)
    probe_steps: int = PROBE_STEPS
    reprobe_every: int = REPROBE_EVERY
    _probes: dict[int, ABTrial[tuple[int, float]]] = field(default_factory=dict)
    _last: int = 1  # the batch size of the last step (what describe() reports)

    def __post_init__(self) -> None:
        self.block = max(1, self.block)
        self.probe_steps = -(-self.probe_steps // self.block) * self.block  # whole blocks

    @property
    def measured(self) -> bool:
        return self.mode == "auto"

    def speculate(self, requests: int = 1) -> bool:
        """Whether the next step, over `requests` requests, drafts."""
        self._last = bucket(requests)
        if not self.measured:
            return True
        return self._probe(requests).next_setting(self.block)

    def record(self, speculated: bool, tokens: int, seconds: float, requests: int) -> None:
        """A step over `requests` requests, at least one of which could speculate, committed
        `tokens` in `seconds` of round time."""
        if not self.measured or requests < 1 or seconds <= 0:
            return
        probe = self._probe(requests)
        if probe.add(speculated, (tokens, seconds), self.probe_steps, self.reprobe_every,
                     _speculation_pays):
            log.info("speculation at %d+ requests a step: %s (tokens/s: %s)", bucket(requests),
                     self.describe(requests), _rates(probe.samples))

    def describe(self, requests: int | None = None) -> str:
        """The setting in words (logs, /metrics labels, benchmarks) for `requests` a step
        (default: the last step's): "speculative", "plain" or "measuring"."""
        if not self.measured:
            return "speculative"
        probe = self._probes.get(self._last if requests is None else bucket(requests))
        if probe is None or probe.chosen is None:
            return "measuring"
        return "speculative" if probe.chosen else "plain"

    def rates(self, requests: int | None = None) -> dict[str, float]:
        """The last measurement's tokens/s per setting for `requests` a step (default: the
        last step's)."""
        probe = self._probes.get(self._last if requests is None else bucket(requests))
        return {} if probe is None else _rates(probe.samples)

    def _probe(self, requests: int) -> ABTrial[tuple[int, float]]:
        return self._probes.setdefault(bucket(requests), ABTrial())
