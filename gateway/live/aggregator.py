"""Live state of the admin page: `LiveAggregator` folds the event bus into bounded state.

The aggregator is the event bus's one long-lived subscriber. It folds the typed events (see
`gateway.live.event_types`) into bounded state (active request traces, a history ring of finished
requests, 2-second time buckets) and re-publishes every event to the page streams it serves
(each an `EventBuffer`, drained in batches). Because a page stream registers and takes its
snapshot in one synchronous step on the event loop, a page sees every event after its snapshot
exactly once, with no gap. A page stream that falls `LISTENER_BUFFER` events behind is sent a fresh
snapshot instead of the events it lost.

MAT counts speculative rounds only: a plain round (`plain`) adds its token to the
throughput and to `plain_rounds`, not a verification round of one token.

Queue depth is derived from the runner's public counters: `queued = in_flight - max_running`
when positive, because admission always fills running slots before anything waits.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from gateway.live.event_types import (
    EventsDropped,
    FeedEvent,
    RequestFinished,
    RequestStarted,
    RoundCompleted,
)
from gateway.live.events import EventBuffer, EventBus, Subscription
from gateway.live.traces import RequestTrace

HISTORY_SIZE = 200  # finished requests kept in memory
MAX_ACTIVE = 1024  # traces of running requests (a lost `request_finished` cannot leak)
BUCKET_S = 2.0  # width of one overview time bucket
SERIES_BUCKETS = 180  # 6 minutes of overview history
RECENT_S = 60.0  # the "recent" window of the overview numbers
STALE_S = 120.0  # a trace idle this long past the request deadline is evicted
LISTENER_BUFFER = 5000  # events a page stream may fall behind before it gets a snapshot


# ---- overview time buckets ------------------------------------------------------------------


@dataclass
class _Usage:
    rounds: int = 0
    accepted: int = 0
    committed: int = 0

    def add(self, accepted: int, committed: int) -> None:
        self.rounds += 1
        self.accepted += accepted
        self.committed += committed

    def merge(self, other: _Usage) -> None:
        self.rounds += other.rounds
        self.accepted += other.accepted
        self.committed += other.committed


@dataclass
class _Bucket:
    end: float = 0.0
    rounds: int = 0
    round_tokens: int = 0  # committed by speculative rounds (MAT's numerator)
    plain_rounds: int = 0
    tokens: int = 0  # committed by every step
    in_flight: int = 0
    queued: int = 0
    per_drafter: dict[str, _Usage] = field(default_factory=dict)


@dataclass(frozen=True)
class Load:
    in_flight: int
    max_running: int
    max_queue: int

    @property
    def running(self) -> int:
        return min(self.in_flight, self.max_running)

    @property
    def queued(self) -> int:
        return max(0, self.in_flight - self.max_running)


def _ratio(num: float, den: float) -> float | None:
    return num / den if den else None


# ---- the aggregator -------------------------------------------------------------------------


class LiveAggregator:
    """Bounded live state folded from the event bus; safe to use from the event loop only."""

    def __init__(
        self,
        load: Callable[[], Load],
        *,
        stale_after_s: float = 600.0 + STALE_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._load = load
        self._clock = clock
        self.stale_after_s = stale_after_s
        self.started_at = clock()
        self.active: collections.OrderedDict[str, RequestTrace] = collections.OrderedDict()
        self.history: collections.deque[RequestTrace] = collections.deque(maxlen=HISTORY_SIZE)
        self.series: collections.deque[_Bucket] = collections.deque(maxlen=SERIES_BUCKETS)
        self.current = _Bucket()
        self.totals = {"requests_started": 0, "requests_finished": 0, "requests_failed": 0}
        self.rounds = 0
        self.round_tokens = 0
        self.plain_rounds = 0
        self.tokens = 0
        self.events_dropped = 0
        self.per_drafter: dict[str, _Usage] = {}
        self.listeners: set[EventBuffer[FeedEvent]] = set()
        self._tasks: list[asyncio.Task[None]] = []

    # -- lifecycle

    def start(self, bus: EventBus) -> None:
        """Subscribe now (so no event is missed) and start consuming and ticking."""
        subscription = bus.subscribe()
        self._tasks = [
            asyncio.create_task(self._consume(subscription), name="admin-live-consume"),
            asyncio.create_task(self._tick_forever(), name="admin-live-tick"),
        ]

    async def stop(self) -> None:
        for listener in list(self.listeners):
            listener.close()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []

    async def _consume(self, subscription: Subscription) -> None:
        try:
            async for event in subscription:
                self.apply(event)
        finally:
            await subscription.aclose()

    async def _tick_forever(self) -> None:
        while True:
            await asyncio.sleep(BUCKET_S)
            self.tick()

    # -- folding events

    def apply(self, event: FeedEvent) -> None:
        if isinstance(event, RoundCompleted):
            self._on_round(event)
        elif isinstance(event, RequestStarted):
            self._trace(event.request_id, event.ts).apply_started(event)
        elif isinstance(event, RequestFinished):
            self._on_finished(event)
        elif isinstance(event, EventsDropped):
            self.events_dropped += event.count
        for listener in self.listeners:
            listener.offer(event)

    def _trace(self, request_id: str, ts: float | None) -> RequestTrace:
        """The running request's trace, started at `ts` if this is its first event."""
        trace = self.active.get(request_id)
        now = ts or self._clock()
        if trace is None:
            trace = RequestTrace(request_id, started_at=now)
            self.active[request_id] = trace
            self.totals["requests_started"] += 1
            while len(self.active) > MAX_ACTIVE:
                self.active.popitem(last=False)
        trace.updated_at = now
        return trace

    def _on_round(self, event: RoundCompleted) -> None:
        trace = self._trace(event.request_id, event.ts)
        before = trace.last_round
        trace.apply_round(event)
        if trace.last_round == before:
            return
        accepted, committed = event.accepted, event.committed
        self.tokens += committed
        self.current.tokens += committed
        if event.plain:
            self.plain_rounds += 1
            self.current.plain_rounds += 1
            return
        self.rounds += 1
        self.round_tokens += committed
        self.current.rounds += 1
        self.current.round_tokens += committed
        name = event.drafter
        if name is not None:
            self.per_drafter.setdefault(name, _Usage()).add(accepted, committed)
            self.current.per_drafter.setdefault(name, _Usage()).add(accepted, committed)

    def _on_finished(self, event: RequestFinished) -> None:
        request_id = event.request_id
        trace = self.active.pop(request_id, None)
        if trace is None:  # ended before its first round (queued, aborted, rejected)
            trace = RequestTrace(request_id, started_at=event.ts or self._clock())
            self.totals["requests_started"] += 1
        trace.apply_finished(event)
        trace.updated_at = trace.finished_at or self._clock()
        self.totals["requests_finished"] += 1
        if trace.status == "failed":
            self.totals["requests_failed"] += 1
        self.history.appendleft(trace)

    def tick(self) -> None:
        """Close the current time bucket (sampling the load) and evict stale traces."""
        now = self._clock()
        load = self._load()
        self.current.end = now
        self.current.in_flight = load.in_flight
        self.current.queued = load.queued
        self.series.append(self.current)
        self.current = _Bucket()
        cutoff = now - self.stale_after_s
        for request_id in [r for r, t in self.active.items() if t.updated_at < cutoff]:
            del self.active[request_id]

    # -- page streams

    def listen(self) -> EventBuffer[FeedEvent]:
        listener: EventBuffer[FeedEvent] = EventBuffer(LISTENER_BUFFER)
        self.listeners.add(listener)
        return listener

    def unlisten(self, listener: EventBuffer[FeedEvent]) -> None:
        listener.close()
        self.listeners.discard(listener)

    # -- snapshots

    def live_snapshot(self, drafters: Iterable[str] = ()) -> dict[str, Any]:
        return {
            "type": "snapshot",
            "ts": self._clock(),
            "drafters": list(drafters),
            "active": [t.public() for t in self.active.values()],
            "history": [t.public() for t in self.history],
            "history_size": HISTORY_SIZE,
        }

    def recent_requests(self, limit: int) -> list[dict[str, Any]]:
        return [t.public() for t in list(self.history)[:limit]]

    def overview(self) -> dict[str, Any]:
        """Load, totals, the last `RECENT_S` seconds, the time series and per-drafter usage."""
        now = self._clock()
        buckets = list(self.series)
        recent = [b for b in buckets if b.end >= now - RECENT_S] + [self.current]
        return {
            "ts": now,
            "uptime_s": now - self.started_at,
            "load": self._load_now(),
            "totals": self._totals_now(),
            "recent": self._recent(recent, now),
            "series": _series(buckets),
            "per_drafter": self._per_drafter(_usage_by_drafter(recent)),
        }

    def _load_now(self) -> dict[str, Any]:
        load = self._load()
        return {
            "in_flight": load.in_flight,
            "running": load.running,
            "queued": load.queued,
            "max_running": load.max_running,
            "max_queue": load.max_queue,
            "live_streams": len(self.listeners),
        }

    def _totals_now(self) -> dict[str, Any]:
        return {
            **self.totals,
            "rounds": self.rounds,
            "plain_rounds": self.plain_rounds,
            "tokens": self.tokens,
            "mat": _ratio(self.round_tokens, self.rounds),
            "events_dropped": self.events_dropped,
        }

    def _recent(self, recent: list[_Bucket], now: float) -> dict[str, Any]:
        rounds = sum(b.rounds for b in recent)
        plain = sum(b.plain_rounds for b in recent)
        round_tokens = sum(b.round_tokens for b in recent)
        tokens = sum(b.tokens for b in recent)
        span = min(RECENT_S, max(now - self.started_at, 1e-9))  # a young server: its uptime
        return {
            "window_s": RECENT_S,
            "rounds": rounds,
            "plain_rounds": plain,
            "tokens": tokens,
            "mat": _ratio(round_tokens, rounds),
            "tokens_per_s": tokens / span,
        }

    def _per_drafter(self, recent: dict[str, _Usage]) -> list[dict[str, Any]]:
        chosen = sum(u.rounds for u in self.per_drafter.values())
        recent_chosen = sum(u.rounds for u in recent.values())
        rows = []
        for name, usage in sorted(self.per_drafter.items()):
            recent_rounds = recent[name].rounds if name in recent else 0
            rows.append({
                "id": name,
                "rounds": usage.rounds,
                "share": _ratio(usage.rounds, chosen),
                "mean_accepted": _ratio(usage.accepted, usage.rounds),
                "mat": _ratio(usage.committed, usage.rounds),
                "recent_rounds": recent_rounds,
                "recent_share": _ratio(recent_rounds, recent_chosen),
            })
        return rows


def _usage_by_drafter(buckets: Iterable[_Bucket]) -> dict[str, _Usage]:
    total: dict[str, _Usage] = {}
    for bucket in buckets:
        for name, usage in bucket.per_drafter.items():
            total.setdefault(name, _Usage()).merge(usage)
    return total


def _series(buckets: list[_Bucket]) -> dict[str, Any]:
    """One list per chart, aligned on the bucket end times `t`."""
    return {
        "bucket_s": BUCKET_S,
        "t": [b.end for b in buckets],
        "mat": [_ratio(b.round_tokens, b.rounds) for b in buckets],
        "tokens_per_s": [b.tokens / BUCKET_S for b in buckets],
        "rounds": [b.rounds for b in buckets],
        "plain_rounds": [b.plain_rounds for b in buckets],
        "in_flight": [b.in_flight for b in buckets],
        "queue_depth": [b.queued for b in buckets],
    }
