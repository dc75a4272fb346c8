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
So "auto" on a CPU measures both in place: it alternates the two over the first rounds that
verify a drafted tree, keeps the one whose head-and-walk time per request is lower (medians:
one slow round must not decide), and measures again every `REPROBE_EVERY` rounds, since the
load (requests per round, MAT) drifts. Both settings commit the same tokens: only the time
differs.
"""

from __future__ import annotations

import logging
import statistics
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

PROBE_ROUNDS = 12  # measured rounds per setting before choosing
REPROBE_EVERY = 2048  # rounds between two measurements


@dataclass
class HeadRows:
    """The setting of the next round (`visited()`) and what the rounds measured (`record`)."""

    mode: str  # "auto", "visited" or "all" (EngineConfig.verify_logits)
    device: str = "cpu"
    probe_rounds: int = PROBE_ROUNDS
    reprobe_every: int = REPROBE_EVERY
    chosen: bool | None = None  # the measured choice (True = visited), once there is one
    _costs: dict[bool, list[float]] = field(default_factory=lambda: {True: [], False: []})
    _since_choice: int = 0

    @property
    def measured(self) -> bool:
        return self.mode == "auto" and str(self.device).startswith("cpu")

    def visited(self) -> bool:
        """Whether the next round computes the visited rows only."""
        if not self.measured:
            return self.mode == "visited"
        if self.chosen is not None:
            return self.chosen
        # probing: the setting with fewer measurements so far (visited first)
        return len(self._costs[True]) <= len(self._costs[False])

    def record(self, visited: bool, seconds: float, rows: int) -> None:
        """A round that verified `rows` drafted trees spent `seconds` on the head and walks."""
        if not self.measured or rows < 1:
            return
        if self.chosen is not None:
            self._since_choice += 1
            if self._since_choice >= self.reprobe_every:
                self._reset()
            return
        self._costs[visited].append(seconds / rows)
        if min(len(c) for c in self._costs.values()) >= self.probe_rounds:
            self.chosen = (statistics.median(self._costs[True])
                           <= statistics.median(self._costs[False]))
            self._since_choice = 0
            log.info("LM head of verified trees: %s (median ms per request and round: %s)",
                     self.describe(), self.medians_ms())

    def _reset(self) -> None:
        self.chosen = None
        self._costs = {True: [], False: []}

    def describe(self) -> str:
        """The setting in words (logs, /metrics labels, benchmarks)."""
        if not self.measured:
            return "visited" if self.visited() else "all"
        if self.chosen is None:
            return "measuring"
        return "visited" if self.chosen else "all"

    def medians_ms(self) -> dict[str, float]:
        """The last measurement's median cost per request and round, in ms, per setting."""
        return {("visited" if k else "all"): 1000 * statistics.median(v)
                for k, v in self._costs.items() if v}
