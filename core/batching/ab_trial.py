"""An in-place A/B measurement of two settings (True and False) for one batch size, and the
choice it leads to: what core/batching/spec_gate.py (drafting on or off) keeps per batch size.

While measuring, the settings alternate in blocks of `block` rounds, True first, until each
has `probe` samples; `decide` then picks from the samples. The choice holds for
`reprobe_every` rounds, then the measurement starts again (the load drifts).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

S = TypeVar("S")


@dataclass
class ABTrial(Generic[S]):
    chosen: bool | None = None  # once measured
    samples: dict[bool, list[S]] = field(default_factory=lambda: {True: [], False: []})
    since_choice: int = 0

    def next_setting(self, block: int = 1) -> bool:
        if self.chosen is not None:
            return self.chosen
        measured = len(self.samples[True]) + len(self.samples[False])
        return (measured // block) % 2 == 0

    def add(self, setting: bool, sample: S, probe: int, reprobe_every: int,
            decide: Callable[[dict[bool, list[S]]], bool]) -> bool:
        """Record one round run with `setting`; True when this round completed a choice."""
        if self.chosen is not None:
            self.since_choice += 1
            if self.since_choice >= reprobe_every:
                self.chosen, self.samples = None, {True: [], False: []}
            return False
        self.samples[setting].append(sample)
        if min(len(s) for s in self.samples.values()) < probe:
            return False
        self.chosen = decide(self.samples)
        self.since_choice = 0
        return True
