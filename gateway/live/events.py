"""In-process live event bus for the admin page: one event per request start, round and end.

The engine worker publishes from its own thread; each subscriber owns a bounded buffer that
drops its oldest events when full, so a slow browser can never block or slow the worker. A
subscriber that lost events first receives `{"type": "dropped", "count": k}`.

Event types (all carry `type`, `seq` and `ts` (unix seconds)):
  request_started   request_id, policy, drafters, prompt_tokens, max_tokens, temperature
  round             request_id, round, policy, drafter, drafted, accepted, committed,
                    completion_tokens, mean_acceptance_length, tokens_per_s, weights,
                    regret_tokens (latest point of the regret curve), feedback_windows
  request_finished  request_id, finish_reason, error, elapsed_s, stats (the request's full
                    statistics incl. regret_curve; null when it was aborted)
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import threading
import time
from typing import Any

from core.config import SamplingParams
from core.stats import RequestStats, RoundStats

DEFAULT_BUFFER = 2048


class Subscription:
    """An async iterator of events; registered from the moment `EventBus.subscribe` returns."""

    def __init__(self, bus: EventBus, maxsize: int) -> None:
        self._bus = bus
        self._buffer: collections.deque[dict[str, Any]] = collections.deque(maxlen=maxsize)
        self._ready = asyncio.Event()
        self._dropped = 0
        self._closed = False

    def _offer(self, event: dict[str, Any]) -> None:
        if len(self._buffer) == self._buffer.maxlen:
            self._dropped += 1  # deque(maxlen) drops the oldest on append
        self._buffer.append(event)
        self._ready.set()

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> dict[str, Any]:
        while not self._buffer:
            if self._closed:
                raise StopAsyncIteration
            self._ready.clear()
            await self._ready.wait()
        if self._dropped:
            count, self._dropped = self._dropped, 0
            return {"type": "dropped", "count": count, "ts": time.time()}
        return self._buffer.popleft()

    async def aclose(self) -> None:
        self._closed = True
        self._ready.set()
        self._bus._unsubscribe(self)


class EventBus:
    """Fan-out of worker-thread events to event-loop subscribers."""

    def __init__(self, buffer_size: int = DEFAULT_BUFFER) -> None:
        self._buffer_size = buffer_size
        self._subscribers: set[Subscription] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._seq = itertools.count(1)
        self._seq_lock = threading.Lock()

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """Attach to the serving event loop (done in the app lifespan)."""
        self._loop = loop

    @property
    def has_subscribers(self) -> bool:
        # Read without a lock on purpose: a stale answer costs one event, never correctness.
        return bool(self._subscribers)

    def subscribe(self, buffer_size: int | None = None) -> Subscription:
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        sub = Subscription(self, buffer_size or self._buffer_size)
        self._subscribers.add(sub)
        return sub

    def publish(self, event: dict[str, Any]) -> None:
        """Thread-safe and non-blocking; events published with no subscriber are discarded."""
        if not self._subscribers or self._loop is None:
            return
        with self._seq_lock:
            stamped = {**event, "seq": next(self._seq), "ts": time.time()}
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            self._deliver(stamped)
            return
        with contextlib.suppress(RuntimeError):  # the loop closed during shutdown
            self._loop.call_soon_threadsafe(self._deliver, stamped)

    def _deliver(self, event: dict[str, Any]) -> None:
        for sub in list(self._subscribers):
            sub._offer(event)

    def _unsubscribe(self, sub: Subscription) -> None:
        self._subscribers.discard(sub)


# ---- event payloads (built on the worker thread from the engine's live statistics) ----------


def started_event(request_id: str, stats: RequestStats, params: SamplingParams) -> dict[str, Any]:
    return {
        "type": "request_started",
        "request_id": request_id,
        "policy": stats.policy,
        "drafters": list(stats.drafter_ids),
        "prompt_tokens": stats.prompt_tokens,
        "max_tokens": params.max_new_tokens,
        "temperature": params.temperature,
        "warm_start_requests": stats.warm_start_requests,  # > 0: a session's learner continued
    }


def round_event(
    request_id: str, rs: RoundStats, stats: RequestStats, elapsed_s: float
) -> dict[str, Any]:
    return {
        "type": "round",
        "request_id": request_id,
        "round": rs.round_index,
        "policy": stats.policy,
        "drafter": rs.drafter,
        "drafted": rs.drafted,
        "accepted": rs.accepted,
        "committed": rs.committed,
        "completion_tokens": stats.completion_tokens,
        "mean_acceptance_length": stats.mean_accepted_tokens,
        "tokens_per_s": stats.completion_tokens / max(elapsed_s, 1e-9),
        "weights": dict(rs.weights),
        # The latest point only: subscribers build the curve; the full one rides on
        # request_finished, so a long request does not cost O(rounds²) to stream.
        "regret_tokens": stats.regret_tokens,
        "feedback_windows": len(stats.regret_curve),
    }


def finished_event(
    request_id: str,
    *,
    finish_reason: str | None,
    error: str | None,
    elapsed_s: float,
    stats: dict[str, Any] | None,
    prompt: str | None = None,
) -> dict[str, Any]:
    event = {
        "type": "request_finished",
        "request_id": request_id,
        "finish_reason": finish_reason,
        "error": error,
        "elapsed_s": elapsed_s,
        "stats": stats,
    }
    if prompt is not None:  # set only with log_prompts on: the request log stores it
        event["prompt"] = prompt
    return event
