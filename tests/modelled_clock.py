"""A clock for tests of choices made from measured time (the speculation gate, the LM-head
setting): time passes only by the costs a test models, never by this machine's compute, so
what such a test asserts is the decision logic, the same on a fast CPU and a slow one."""

from __future__ import annotations


class ModelledClock:
    """Seconds since the test began, as the test's cost model says (SpecEngine's `clock`)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
