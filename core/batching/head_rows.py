"""Which rows of a verified tree the target's LM head computes in the call right after the
tree pass: every node ("all", one call), or the root only ("visited": the acceptance walk
computes each further node it reaches, one call each, about MAT calls a round).

"auto" is a rule by head: "all", unless the head runs on a CPU as a plain F.linear (a target
outside the lean forward, or one whose weights are not packed: fp32). Through the lean
forward's packed head (core/model/lean_decoder.py; bf16 on a CPU) a call streams the head's
weights (49,152 x 576 for SmolLM2, 57 MB) at the same rate for 1 row as for 16, so one call
over every node costs about what the root's call alone does, and each further call of the
walk reads the whole head again. Measured on this project's 2-core AVX512-BF16 machine, served
13-node tree, acceptance loss, in-process, 2026-12-07 (two passes each), the head phase per
step "all" against "visited": 3.5-4.0 ms against 6.3-12.6 at one request, 10.2-10.5 against
40.8-42.7 at four, 18.4-19.6 against 21.7-49.7 at eight; end to end in
bench/results/verify_logits*.md. On an accelerator one call for 60 rows costs what one row
does. An unpacked head on a CPU keeps "visited": with the Hugging Face head in fp32 on an AVX2
VM it ran 1.09-1.20x faster end to end (the measurement until this change). Both settings
commit the same tokens: only the time differs.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class HeadRows:
    """The verification head's setting (EngineConfig.verify_logits) on `device`."""

    mode: str  # "auto", "visited" or "all"
    device: str = "cpu"
    packed_head: bool = False  # the target's head streams its weights packed (Target.packed_head)

    def visited(self) -> bool:
        """Whether a round computes the visited rows only."""
        if self.mode == "auto":
            return str(self.device).startswith("cpu") and not self.packed_head
        return self.mode == "visited"

    def describe(self) -> str:
        """The setting in words (logs, /metrics labels, benchmarks)."""
        return "visited" if self.visited() else "all"
