"""Scheduling logic of the engine worker, with a scripted engine double.

The double emits one token per round and records the order in which requests advance; every
value it returns is a real `core` type (`RoundOutput`, `StatsSnapshot`, `RoundStats`). The real
engine is exercised end to end in test_openai_e2e.py.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from typing import Any

import pytest

from core.config import SamplingParams
from core.engine import ContextLengthError, PolicyError, RoundOutput
from core.served_facts import ServedFacts
from core.stats import RequestStats, RoundStats, StatsSnapshot
from gateway.errors import APIError
from gateway.live.events import EventBus
from gateway.metrics import GatewayMetrics
from gateway.runner import EngineRunner, RequestSpec, Update

pytestmark = pytest.mark.timeout(30)


class ScriptedEngine:
    """One token per round, round-robin, like SpecEngine.step()."""

    model_name = "scripted"
    max_context = 100_000

    def __init__(self, *, round_s: float = 0.0, fail_on_round: int | None = None,
                 hold: threading.Event | None = None) -> None:
        self.tokenizer: Any = _Tok()
        self.round_s = round_s
        self.hold = hold  # when given, no request advances until it is set
        self.fail_on_round = fail_on_round
        self.rounds = 0
        self.order: list[str] = []
        self.aborted: list[str] = []
        self._reqs: dict[str, tuple[SamplingParams, RequestStats]] = {}
        self._next = 0

    def drafter_ids(self) -> list[str]:
        return ["d1"]

    def head_setting(self) -> str:
        return "all"

    def facts(self) -> ServedFacts:
        return ServedFacts(has_router=False, sampling_defaults={}, drafter_kinds={"d1": "eagle3"},
                           aux_layers=None)

    def runtime_pool(self) -> None:
        return None  # its pool is fixed

    def forget_costs(self) -> None:
        pass

    def check_request(self, prompt: list[int], params: SamplingParams,
                      policy: str = "auto") -> None:
        if len(prompt) + params.max_new_tokens > self.max_context:
            raise ContextLengthError(max_context=self.max_context, prompt_tokens=len(prompt),
                                     max_new_tokens=params.max_new_tokens)
        if policy not in ("auto", "fixed:d1"):
            raise PolicyError(f"unknown policy {policy!r}")

    def add_request(
        self, rid: str, prompt: list[int], params: SamplingParams, policy: str = "auto",
        session: str | None = None,
    ) -> None:
        self.check_request(prompt, params, policy)
        self._reqs[rid] = (params, RequestStats(policy="normalhedge", drafter_ids=("d1",)))

    def step(self) -> list[RoundOutput]:
        if not self._reqs:
            return []
        if self.hold is not None and not self.hold.wait(0.01):
            return []  # a round that advanced nothing: the worker still takes commands between
        self.rounds += 1
        if self.fail_on_round == self.rounds:
            raise RuntimeError("boom")
        time.sleep(self.round_s)
        ids = list(self._reqs)
        self._next %= len(ids)
        rid = ids[self._next]
        params, stats = self._reqs[rid]
        rs = RoundStats(stats.rounds, "d1", 4, 0, 1, 0, 0, 0, 0)
        stats.record_round(rs)
        self.order.append(rid)
        done = stats.completion_tokens >= params.max_new_tokens
        if done:
            del self._reqs[rid]
        else:
            self._next += 1
        return [RoundOutput(rid, [7], None, done, "length" if done else None, rs, stats.snapshot())]

    def abort(self, rid: str) -> None:
        self.aborted.append(rid)
        self._reqs.pop(rid, None)

    def has_unfinished(self) -> bool:
        return bool(self._reqs)

    def num_active(self) -> int:
        return len(self._reqs)


class _Tok:
    def __call__(self, text: str, **_: Any) -> dict[str, list[int]]:
        return {"input_ids": [1, 2]}

    def __len__(self) -> int:
        return 16


def make_runner(engine: Any, **kw: Any) -> EngineRunner:
    options: dict[str, Any] = dict(max_running=4, max_queue=4, request_timeout_s=30, warmup=False)
    options.update(kw)
    runner = EngineRunner(lambda: engine, **options)
    runner.start()
    return runner


def spec(rid: str, n: int = 3) -> RequestSpec:
    return RequestSpec(rid, [1, 2], SamplingParams(max_new_tokens=n))


async def drain(sink: asyncio.Queue[Update], count: int) -> list[Update]:
    """Collect updates until `count` requests have finished."""
    out: list[Update] = []
    while sum(u.finished for u in out) < count:
        out.append(await asyncio.wait_for(sink.get(), 10))
    return out


async def ready(runner: EngineRunner) -> None:
    assert await runner.wait_ready(10)


def test_requests_interleave_round_by_round() -> None:
    async def main() -> list[str]:
        engine = ScriptedEngine()
        runner = make_runner(engine)
        await ready(runner)
        sink: asyncio.Queue[Update] = asyncio.Queue()
        await runner.submit([spec("a"), spec("b"), spec("c")], sink)
        updates = await drain(sink, 3)
        await runner.stop(1)
        assert all(u.error is None for u in updates)
        assert [u.stats.completion_tokens for u in updates if u.stats] == [3, 3, 3]
        return engine.order

    assert asyncio.run(main()) == ["a", "b", "c"] * 3


def test_full_queue_raises_429_and_counts_capacity() -> None:
    async def main() -> None:
        # "a" cannot finish until released, however slowly this test reaches its next submit
        release = threading.Event()
        runner = make_runner(ScriptedEngine(hold=release), max_running=1, max_queue=1)
        await ready(runner)
        sink: asyncio.Queue[Update] = asyncio.Queue()
        await runner.submit([spec("a", 5)], sink)
        with pytest.raises(APIError) as err:
            await runner.submit([spec("b"), spec("c")], sink)  # all-or-nothing for n choices
        assert err.value.status == 429 and err.value.headers == {"Retry-After": "1"}
        await runner.submit([spec("b")], sink)  # the one waiting slot is still free
        release.set()
        updates = await drain(sink, 2)
        assert [u.request_id for u in updates if u.finished] == ["a", "b"]  # FIFO admission
        assert runner.in_flight == 0
        await runner.stop(1)

    asyncio.run(main())


def test_abort_frees_the_engine_request_and_acknowledges() -> None:
    async def main() -> None:
        engine = ScriptedEngine(round_s=0.005)
        runner = make_runner(engine)
        await ready(runner)
        sink: asyncio.Queue[Update] = asyncio.Queue()
        await runner.submit([spec("long", 1000)], sink)
        first = await asyncio.wait_for(sink.get(), 5)
        runner.abort("long")
        ack = await drain(sink, 1)
        assert first.token_ids == [7]
        assert ack[-1].finished and ack[-1].error is None and ack[-1].stats is not None
        assert engine.aborted == ["long"] and not engine.has_unfinished()
        assert runner.in_flight == 0
        runner.abort("long")  # idempotent
        await runner.stop(1)

    asyncio.run(main())


def test_deadline_aborts_with_a_timeout_error() -> None:
    async def main() -> None:
        engine = ScriptedEngine(round_s=0.01)
        runner = make_runner(engine, request_timeout_s=0.1)
        await ready(runner)
        sink: asyncio.Queue[Update] = asyncio.Queue()
        await runner.submit([spec("slow", 10_000)], sink)
        last = (await drain(sink, 1))[-1]
        assert last.error is not None and last.error.status == 408
        assert last.error.code == "request_timeout" and engine.aborted == ["slow"]
        await runner.stop(1)

    asyncio.run(main())


def test_the_engines_refusal_is_raised_by_submit_as_a_400_naming_the_field() -> None:
    async def main() -> None:
        engine = ScriptedEngine()
        runner = make_runner(engine)
        await ready(runner)
        sink: asyncio.Queue[Update] = asyncio.Queue()
        huge = RequestSpec("huge", [1, 2], SamplingParams(max_new_tokens=200_000),
                           prompt_param="messages")
        with pytest.raises(APIError) as err:
            await runner.submit([spec("ok"), huge], sink)  # one refused choice refuses them all
        assert (err.value.status, err.value.code) == (400, "context_length_exceeded")
        assert err.value.param == "messages" and "200002 tokens" in err.value.message
        with pytest.raises(APIError) as err:
            await runner.submit([RequestSpec("p", [1], SamplingParams(), "fixed:zeta")], sink)
        assert (err.value.param, err.value.code) == ("hedgespec.policy", "invalid_policy")
        assert runner.in_flight == 0 and sink.empty() and engine.order == []
        await runner.stop(1)

    asyncio.run(main())


def test_updates_carry_frozen_snapshots_not_the_engines_live_statistics() -> None:
    async def main() -> None:
        runner = make_runner(ScriptedEngine(round_s=0.005))
        await ready(runner)
        sink: asyncio.Queue[Update] = asyncio.Queue()
        await runner.submit([spec("a", 3)], sink)
        (last,) = [u for u in await drain(sink, 1) if u.finished]
        assert isinstance(last.stats, StatsSnapshot) and last.stats.rounds == 3
        with pytest.raises(dataclasses.FrozenInstanceError):
            last.stats.rounds = 4  # type: ignore[misc]
        await runner.stop(1)

    asyncio.run(main())


def test_a_failing_round_fails_running_requests_and_the_worker_survives() -> None:
    async def main() -> None:
        runner = make_runner(ScriptedEngine(fail_on_round=2))
        await ready(runner)
        sink: asyncio.Queue[Update] = asyncio.Queue()
        await runner.submit([spec("x", 5)], sink)
        failed = (await drain(sink, 1))[-1]
        assert failed.error is not None and failed.error.status == 500
        await runner.submit([spec("y", 2)], sink)
        after = await drain(sink, 1)
        assert after[-1].error is None and after[-1].finish_reason == "length"
        await runner.stop(1)

    asyncio.run(main())


def test_stop_drains_then_refuses_new_work() -> None:
    async def main() -> None:
        runner = make_runner(ScriptedEngine(round_s=0.01))
        await ready(runner)
        sink: asyncio.Queue[Update] = asyncio.Queue()
        await runner.submit([spec("a", 10)], sink)
        await runner.stop(5)
        updates = [sink.get_nowait() for _ in range(sink.qsize())]
        assert updates[-1].finished and updates[-1].error is None  # finished, not cut
        with pytest.raises(APIError) as err:
            await runner.submit([spec("b")], sink)
        assert err.value.status == 503

    asyncio.run(main())


def test_load_failure_is_reported_as_not_ready() -> None:
    async def main() -> None:
        def broken() -> Any:
            raise FileNotFoundError("no pool.json")

        runner = EngineRunner(broken, max_running=1, max_queue=1, request_timeout_s=1)
        runner.start()
        await asyncio.to_thread(runner._thread.join, 5)
        with pytest.raises(APIError) as err:
            runner.check_ready()
        assert err.value.status == 503 and "no pool.json" in err.value.message

    asyncio.run(main())


def test_call_runs_on_the_worker_and_refreshes_info() -> None:
    async def main() -> None:
        engine = ScriptedEngine()
        engine.drafter_ids = lambda: ["d1", "d2"]  # type: ignore[method-assign]
        runner = make_runner(engine)
        await ready(runner)
        import threading

        name = await asyncio.wrap_future(runner.call(lambda e: threading.current_thread().name))
        assert name == "engine-worker"
        assert runner.info is not None and runner.info.drafter_ids == ("d1", "d2")
        await runner.stop(1)

    asyncio.run(main())


def test_rounds_feed_metrics_and_events() -> None:
    async def main() -> list[str]:
        metrics, bus = GatewayMetrics(), EventBus()
        engine = ScriptedEngine()
        runner = make_runner(engine, metrics=metrics, events=bus)
        await ready(runner)
        sub = bus.subscribe()
        sink: asyncio.Queue[Update] = asyncio.Queue()
        await runner.submit([spec("a", 2)], sink)
        await drain(sink, 1)
        kinds = []
        while not kinds or kinds[-1] != "request_finished":
            kinds.append((await asyncio.wait_for(sub.__anext__(), 5)).to_json()["type"])
        await sub.aclose()
        text = metrics.render().decode()
        d1 = '{drafter="d1",kind="eagle3"}'  # a double without drafter_kind: eagle3
        assert f"hedgespec_spec_decode_num_drafts_total{d1} 2.0" in text
        assert f"hedgespec_spec_decode_num_draft_tokens_total{d1} 8.0" in text
        await runner.stop(1)
        return kinds

    assert asyncio.run(main()) == ["request_started", "round", "round", "request_finished"]
