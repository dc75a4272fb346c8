"""`priority` (vLLM's field): when the batch is full, the waiting request with the lowest value
starts first, arrival order among equals (the scripted engine double of test_runner.py)."""

from __future__ import annotations

import asyncio
import dataclasses
import threading

import pytest

from gateway.openai.protocol import ChatCompletionRequest
from gateway.runner import Update
from tests.gateway.test_runner import ScriptedEngine, drain, make_runner, ready, spec

pytestmark = pytest.mark.timeout(30)


def test_waiting_requests_start_by_priority_then_arrival() -> None:
    async def main() -> list[str]:
        hold = threading.Event()
        engine = ScriptedEngine(hold=hold)
        runner = make_runner(engine, max_running=1, max_queue=8)
        await ready(runner)
        sink: asyncio.Queue[Update] = asyncio.Queue()
        await runner.submit([spec("first", 1)], sink)  # takes the only slot
        for rid, priority in (("low", 5), ("urgent", -1), ("normal-a", 0), ("normal-b", 0)):
            await runner.submit([dataclasses.replace(spec(rid, 1), priority=priority)], sink)
        hold.set()
        await drain(sink, 5)
        await runner.stop(1)
        return engine.order

    assert asyncio.run(main()) == ["first", "urgent", "normal-a", "normal-b", "low"]


def test_priority_is_a_request_field() -> None:
    req = ChatCompletionRequest.model_validate(
        {"model": "m", "messages": [{"role": "user", "content": "hi"}], "priority": -3})
    assert req.priority == -3
