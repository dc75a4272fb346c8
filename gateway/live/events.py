"""In-process live event bus for the admin page: one event per request start, round and end.

The engine worker publishes from its own thread; each subscriber owns an `EventBuffer` that
drops its oldest events when full, so a slow browser can never block or slow the worker. A
subscriber that lost events first receives `EventsDropped(count=k)`.

`EventBuffer` is the one bounded buffer of the live data path: the bus's subscriptions use it,
and so do the aggregator's page streams (`gateway.live.aggregator`), which drain it in batches.

Events are the frozen dataclasses of `gateway.live.event_types` (their fields and wire forms are
listed there); the bus stamps each with `seq` and `ts` (unix seconds). The builders at the end
of this module make them from the engine's statistics snapshots, on the worker thread.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import itertools
import threading
import time
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Generic, TypeVar

from core.api import RoundStats, SamplingParams, StatsSnapshot
from gateway.live.event_types import (
    EventsDropped,
    FeedEvent,
    FinalStats,
    PublishedEvent,
    RequestFinished,
    RequestStarted,
    RoundCompleted,
)

DEFAULT_BUFFER = 2048

E = TypeVar("E")


class EventBuffer(Generic[E]):
    """One consumer's bounded FIFO of events, used from the event loop only.

    `offer` never blocks: when full it drops the oldest event and counts it in `lost`, so the
    producer's speed never depends on the consumer's. The consumer waits, then takes events one
    at a time (`pop`) or all at once (`drain`); after `close` it ends once emptied.
    """

    def __init__(self, maxsize: int) -> None:
        self._events: collections.deque[E] = collections.deque(maxlen=maxsize)
        self._ready = asyncio.Event()
        self.lost = 0
        self.closed = False

    def offer(self, event: E) -> None:
        if len(self._events) == self._events.maxlen:
            self.lost += 1  # deque(maxlen) drops the oldest on append
        self._events.append(event)
        self._ready.set()

    async def wait(self) -> None:
        """Until an event is buffered or the buffer is closed."""
        while not self._events and not self.closed:
            self._ready.clear()
            await self._ready.wait()

    def pop(self) -> E | None:
        """The oldest event, or None when empty."""
        return self._events.popleft() if self._events else None

    def take_lost(self) -> int:
        """Events dropped since the last call."""
        lost, self.lost = self.lost, 0
        return lost

    def drain(self) -> tuple[list[E], int]:
        """Every buffered event and the count dropped before them; empties the buffer."""
        events = list(self._events)
        self._events.clear()
        return events, self.take_lost()

    def close(self) -> None:
        self.closed = True
        self._ready.set()


class Subscription:
    """An async iterator of events; registered from the moment `EventBus.subscribe` returns."""

    def __init__(self, bus: EventBus, maxsize: int) -> None:
        self._bus = bus
        self.buffer: EventBuffer[FeedEvent] = EventBuffer(maxsize)

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> FeedEvent:
        await self.buffer.wait()
        lost = self.buffer.take_lost()
        if lost:  # before the events that survived, so the consumer knows it missed some
            return EventsDropped(count=lost, ts=time.time())
        event = self.buffer.pop()
        if event is None:  # closed and empty
            raise StopAsyncIteration
        return event

    async def aclose(self) -> None:
        self.buffer.close()
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

    def publish(self, event: PublishedEvent) -> None:
        """Thread-safe and non-blocking; events published with no subscriber are discarded."""
        if not self._subscribers or self._loop is None:
            return
        with self._seq_lock:
            stamped = dataclasses.replace(event, seq=next(self._seq), ts=time.time())
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            self._deliver(stamped)
            return
        with contextlib.suppress(RuntimeError):  # the loop closed during shutdown
            self._loop.call_soon_threadsafe(self._deliver, stamped)

    def _deliver(self, event: FeedEvent) -> None:
        for sub in list(self._subscribers):
            sub.buffer.offer(event)

    def _unsubscribe(self, sub: Subscription) -> None:
        self._subscribers.discard(sub)


# ---- event builders (on the worker thread, from the engine's statistics snapshots) ----------


def started_event(request_id: str, stats: StatsSnapshot, params: SamplingParams,
                  kinds: Mapping[str, str] | None = None) -> RequestStarted:
    """`kinds`: drafter id -> kind (`eagle3`, `ngram`, ...); the page colours by kind."""
    return RequestStarted(
        request_id=request_id,
        policy=stats.policy,
        drafters=tuple(stats.drafter_ids),
        drafter_kinds={i: (kinds or {}).get(i, "eagle3") for i in stats.drafter_ids},
        prompt_tokens=stats.prompt_tokens,
        max_tokens=params.max_new_tokens,
        temperature=params.temperature,
        top_p=params.top_p,
        top_k=params.top_k,
        warm_start_requests=stats.warm_start_requests,
    )


def round_event(
    request_id: str, rs: RoundStats, stats: StatsSnapshot, elapsed_s: float
) -> RoundCompleted:
    return RoundCompleted(
        request_id=request_id,
        round=rs.round_index,
        policy=stats.policy,
        drafter=rs.drafter,
        drafted=rs.drafted,
        accepted=rs.accepted,
        committed=rs.committed,
        completion_tokens=stats.completion_tokens,
        mean_acceptance_length=stats.mean_acceptance_length,
        tokens_per_s=stats.completion_tokens / max(elapsed_s, 1e-9),
        weights=dict(rs.weights),
        batch_rows=rs.batch_rows,
        plain=rs.plain,
        regret=stats.regret,
        regret_unit=stats.regret_unit,
        feedback_windows=len(stats.regret_points),
    )


def finished_event(
    request_id: str,
    *,
    finish_reason: str | None,
    error: str | None,
    elapsed_s: float,
    stats: StatsSnapshot | None,
    prompt: str | None = None,
) -> RequestFinished:
    return RequestFinished(
        request_id=request_id,
        finish_reason=finish_reason,
        error=error,
        elapsed_s=elapsed_s,
        stats=final_stats(stats) if stats is not None else None,
        prompt=prompt,
    )


# Each `FinalStats` field, in order, and the `StatsSnapshot` attribute it carries: a field of the
# statistics' declaration or a measure derived from them. `final_stats` builds the wire event
# from this table alone; tests/gateway/live/test_stats_carried.py fails on a snapshot field that
# is neither carried here nor left off below.
FINAL_STATS_SOURCE: Mapping[str, str] = MappingProxyType({
    "policy": "policy",
    "prompt_tokens": "prompt_tokens",
    "completion_tokens": "completion_tokens",
    "rounds": "rounds",
    "target_forwards": "target_forwards",
    "mean_acceptance_length": "mean_acceptance_length",
    "num_plain_steps": "plain_rounds",
    "plain_step_indices": "plain_round_indices",
    "num_draft_tokens": "num_draft_tokens",
    "num_accepted_draft_tokens": "num_accepted_draft_tokens",
    "acceptance_by_position": "accepted_by_position",
    "accepted_per_round": "accepted_per_round",
    "drafter_choices": "drafter_per_round",
    "regret_tokens": "regret_tokens",
    "regret": "regret",
    "regret_unit": "regret_unit",
    "regret_curve": "regret_points",  # the curve of the regret the learner minimised
    "regret_seconds": "regret_seconds",
    "regret_time_ratio": "regret_time_ratio",
    "final_weights": "weights",
    "warm_start_requests": "warm_start_requests",
    "time_draft_s": "time_draft_s",
    "time_verify_s": "time_verify_s",
    "time_evaluate_s": "time_evaluate_s",
    "time_bookkeeping_s": "time_bookkeeping_s",
})

# The snapshot's fields that reach the wire only through a derived measure, or not at all: why.
LEFT_OFF_THE_WIRE: Mapping[str, str] = MappingProxyType({
    "drafter_ids": "request_started lists them (`drafters`)",
    "prefill_tokens": "in completion_tokens; mean_acceptance_length leaves it out",
    "plain_tokens": "in completion_tokens; mean_acceptance_length leaves it out",
    "est_len_sum": "the regret curve is computed from it",
    "chosen_est_len_sum": "the regret curve is computed from it",
    "estimates": "ÂL's calibration: the benchmarks read it in process",
    "regret_curve": "carried as regret_curve (regret_points) under the acceptance losses",
    "time_loss": "regret_unit says which loss the learner minimised",
    "arm_seconds": "regret_seconds and regret_time_ratio are computed from it",
    "learner_seconds": "regret_seconds and regret_time_ratio are computed from it",
    "learner_tokens": "regret_time_ratio is computed from it",
    "time_per_token": "regret_time_ratio is computed from it",
    "regret_seconds_curve": "carried as regret_curve (regret_points) under the time loss",
    "asleep_rounds": "the arm policy's sleep: read in process (tests, benchmarks) for now",
    "wakes": "the arm policy's sleep: read in process (tests, benchmarks) for now",
})


def final_stats(s: StatsSnapshot) -> FinalStats:
    """A request's full statistics as `request_finished` carries them (mappings as copies)."""
    carried: dict[str, Any] = {}
    for name, source in FINAL_STATS_SOURCE.items():
        value = getattr(s, source)
        carried[name] = dict(value) if isinstance(value, Mapping) else value
    return FinalStats(**carried)
