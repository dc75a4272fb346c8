"""A clock for tests of choices made from measured time (the time loss's round costs, the
start rule): time passes only by the costs a test models, never by this machine's compute, so
what such a test asserts is the decision logic, the same on a fast CPU and a slow one."""

from __future__ import annotations

from typing import Any


class ModelledClock:
    """Seconds since the test began, as the test's cost model says (SpecEngine's `clock`)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def slowed_rows(engine: Any, per_call_s: float, per_row_s: float) -> None:
    """Make the target's batched pass of a SpecEngine on a ModelledClock cost `per_call_s`
    plus `per_row_s` a row it computes (nothing else advances the clock): the compute-bound
    pass of a large batch (rows dear) or the memory-bound one of a small one, whatever this
    CPU's own speed. Rows padded to the widest, as Target.forward_rows computes them."""
    forward_rows, clock = engine.target.forward_rows, engine.clock
    assert isinstance(clock, ModelledClock)

    def slow(cache: Any, slots: list[int], tokens: list[Any], *args: Any, **kw: Any) -> Any:
        clock.advance(per_call_s + per_row_s * len(tokens) * max(int(t.numel()) for t in tokens))
        return forward_rows(cache, slots, tokens, *args, **kw)

    engine.target.forward_rows = slow
