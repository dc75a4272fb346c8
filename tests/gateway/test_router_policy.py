"""Policy `router` is served only when the pool ships a prompt router: the engine decides, and
the runner answers its refusal as the 400 that names `hedgespec.policy`, before any response."""

from __future__ import annotations

import asyncio

import pytest

from bench.harness.tiny_models import make_engine, random_drafter, tiny_target
from core.config import SamplingParams, TreeConfig
from gateway.errors import APIError
from gateway.runner import EngineRunner, RequestSpec, Update

pytestmark = pytest.mark.timeout(60)


class Vocab:
    """The runner reads only the tokenizer's size from a tokenizer-less tiny engine."""

    def __len__(self) -> int:
        return 64


class FirstDrafter:
    """A prompt router that always picks `d0`."""

    def route(self, prompt_ids: list[int]) -> str:
        return "d0"


def test_the_gateway_serves_policy_router_only_when_the_pool_has_a_router() -> None:
    target = tiny_target(vocab=64, seed=2)
    engine = make_engine(target, {"d0": random_drafter(target, seed=0)},
                         TreeConfig(top_k=2, depth=2, total_tokens=4))  # fmt: skip
    engine.tokenizer = Vocab()
    runner = EngineRunner(lambda: engine, max_running=2, max_queue=2, request_timeout_s=30,
                          warmup=False)  # fmt: skip
    spec = RequestSpec("r", [1, 2, 3], SamplingParams(max_new_tokens=2), "router")

    async def main() -> Update:
        runner.start()
        assert await runner.wait_ready(30)
        sink: asyncio.Queue[Update] = asyncio.Queue()
        with pytest.raises(APIError, match="needs a prompt router") as err:
            await runner.submit([spec], sink)
        assert (err.value.status, err.value.param) == (400, "hedgespec.policy")
        engine.router = FirstDrafter()  # type: ignore[assignment]
        await runner.submit([spec], sink)
        while not (update := await asyncio.wait_for(sink.get(), 30)).finished:
            pass
        await runner.stop(1)
        return update

    last = asyncio.run(main())
    assert last.error is None and last.stats is not None
    assert last.stats.policy == "router" and set(last.stats.drafter_per_round) <= {"d0"}
