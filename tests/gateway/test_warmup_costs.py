"""The server's warm-up (gateway/runner.py) teaches the time loss nothing: its steps pay lazy
set-up, and its short speculative request would end the awake level's first try with a loss
that keeps the next requests asleep (core/selection/arm_costs.StepCosts.start)."""

from __future__ import annotations

import asyncio

import pytest

from bench.harness.tiny_models import make_engine, random_drafter, tiny_target
from core.config import SelectorConfig, TreeConfig
from core.selection.arm_costs import Start
from gateway.runner import EngineRunner

pytestmark = pytest.mark.timeout(60)


class Tokenizer:
    """What the runner's warm-up reads of a tokenizer: its size and the ids of "Hello"."""

    def __len__(self) -> int:
        return 64

    def __call__(self, text: str) -> dict[str, list[int]]:
        return {"input_ids": [1, 2, 3]}


def test_after_the_warm_up_the_engine_has_measured_nothing() -> None:
    target = tiny_target(vocab=64, seed=2)
    engine = make_engine(target, {"d0": random_drafter(target, seed=0)},
                         TreeConfig(top_k=2, depth=2, total_tokens=4),
                         selector=SelectorConfig(loss="time"))
    engine.tokenizer = Tokenizer()
    runner = EngineRunner(lambda: engine, max_running=2, max_queue=2, request_timeout_s=30,
                          warmup=True)

    async def main() -> None:
        runner.start()
        assert await runner.wait_ready(30)
        await runner.stop(1)

    asyncio.run(main())
    assert engine.costs.model(1) is None  # no step of the warm-up left in the fit
    # and no level tried: the first request at one stream tries every member awake
    assert engine.costs.start(1, [Start.AWAKE, Start.ASLEEP]) is Start.AWAKE
