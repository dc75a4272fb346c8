"""Which rows of a verified tree the target's LM head computes in the call right after the
tree pass: every node ("all", one call), or the root only ("visited": the acceptance walk
computes each further node it reaches, one call each, about MAT calls a round).

"auto" is a rule by device: "all" on an accelerator, where one call for 60 rows costs what one
row does, and "visited" on a CPU, where a call reads the whole head (49,152 x 576 for SmolLM2)
from memory and every row adds its arithmetic. The two CPUs measured both favour "visited":
an AVX2 VM in fp32 with a 21-node tree ran 1.09-1.20x faster end to end; an AVX-512 VM in bf16
with the 13-node CPU tree timed the head phase in place at 3.9 ms against 5.5 ms a round, about
2% of a round, inside its end-to-end noise (bench/results/verify_logits.md). An in-place
measurement of both settings per batch size (this module until issue 40) chose "visited" on
both, so it changed nothing there and was retired. Both settings commit the same tokens: only
the time differs.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class HeadRows:
    """The verification head's setting (EngineConfig.verify_logits) on `device`."""

    mode: str  # "auto", "visited" or "all"
    device: str = "cpu"

    def visited(self) -> bool:
        """Whether a round computes the visited rows only."""
        if self.mode == "auto":
            return str(self.device).startswith("cpu")
        return self.mode == "visited"

    def describe(self) -> str:
        """The setting in words (logs, /metrics labels, benchmarks)."""
        return "visited" if self.visited() else "all"
