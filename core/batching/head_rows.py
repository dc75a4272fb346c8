"""Which rows of a verified tree the target's LM head computes in the call right after the
tree pass: every node ("all", one call), or the root only ("visited": the acceptance walk
computes each further node it reaches, one call each, about MAT calls a round).

Which is cheaper depends on the machine, not only on the device kind. On a GPU one call for 60
rows costs what one row does, so "all" wins. On a CPU a call reads the whole head (49,152 x 576
for SmolLM2) from memory, and what more rows add depends on the CPU's small-matrix speed:
"visited" ran 1.09-1.20x faster than "all" end to end on an AVX2 VM in fp32 with a 21-node
tree; on an AVX-512 VM in bf16 with the 13-node CPU tree the end-to-end difference was inside
the VM's noise, while the head phase timed in place favoured "visited" by 3.9 ms to 5.5 ms a
round (bench/results/verify_logits.md).
So "auto" on a CPU measures both in place, for each batch size (requests a round, in powers of
two): it alternates the two over the first rounds that verify a drafted tree, keeps the one
whose head-and-walk time per request is lower (medians: one slow round must not decide), and
measures again every `REPROBE_EVERY` rounds of that size, since the load (MAT) drifts. Both
settings commit the same tokens: only the time differs.
"""

from __future__ import annotations

import logging
import statistics
from dataclasses import dataclass, field

from core.batching.ab_trial import ABTrial
from core.selection.arm_costs import bucket

log = logging.getLogger(__name__)

PROBE_ROUNDS = 12  # measured rounds per setting before choosing
REPROBE_EVERY = 2048  # rounds between two measurements (per batch size)


def _cheaper_visited(costs: dict[bool, list[float]]) -> bool:
    """Medians: one slow round (a page fault, GC) must not decide."""
    return statistics.median(costs[True]) <= statistics.median(costs[False])


def _medians_ms(trial: ABTrial[float]) -> dict[str, float]:
    return {("visited" if k else "all"): 1000 * statistics.median(v)
            for k, v in trial.samples.items() if v}


@dataclass
class HeadRows:
    """The setting of the next round (`visited(requests)`) and what the rounds measured
    (`record`), per batch size."""

    mode: str  # "auto", "visited" or "all" (EngineConfig.verify_logits)
    device: str = "cpu"
    probe_rounds: int = PROBE_ROUNDS
    reprobe_every: int = REPROBE_EVERY
    _probes: dict[int, ABTrial[float]] = field(default_factory=dict)
    _last: int = 1  # the batch size of the last round (what describe() reports)

    @property
    def measured(self) -> bool:
        return self.mode == "auto" and str(self.device).startswith("cpu")

    def _probe(self, requests: int) -> ABTrial[float]:
        return self._probes.setdefault(bucket(requests), ABTrial())

    def _seen(self, requests: int | None) -> ABTrial[float] | None:
        """The measurement of `requests` a round (None: the last round's), if one began."""
        return self._probes.get(self._last if requests is None else bucket(requests))

    @property
    def chosen(self) -> bool | None:
        """The choice for the last round's batch size (True = visited), once measured."""
        probe = self._seen(None)
        return None if probe is None else probe.chosen

    def visited(self, requests: int = 1) -> bool:
        """Whether the next round, over `requests` requests, computes the visited rows only."""
        self._last = bucket(requests)
        if not self.measured:
            return self.mode == "visited"
        return self._probe(requests).next_setting()

    def record(self, visited: bool, seconds: float, requests: int) -> None:
        """A round over `requests` requests (at least one with a drafted tree) spent `seconds`
        on the LM head and the acceptance walks."""
        if not self.measured or requests < 1:
            return
        probe = self._probe(requests)
        if probe.add(visited, seconds / requests, self.probe_rounds, self.reprobe_every,
                     _cheaper_visited):
            log.info("LM head of verified trees, %d+ requests a round: %s (median ms per "
                     "request and round: %s)", bucket(requests), self.describe(requests),
                     _medians_ms(probe))

    def describe(self, requests: int | None = None) -> str:
        """The setting in words (logs, /metrics labels, benchmarks), for `requests` a round
        (default: the last round's)."""
        if not self.measured:
            return "visited" if self.mode == "visited" else "all"
        probe = self._seen(requests)
        if probe is None or probe.chosen is None:
            return "measuring"
        return "visited" if probe.chosen else "all"

    def medians_ms(self, requests: int | None = None) -> dict[str, float]:
        """The last measurement's median cost per request and round, in ms, per setting, for
        `requests` a round (default: the last round's)."""
        probe = self._seen(requests)
        return {} if probe is None else _medians_ms(probe)
