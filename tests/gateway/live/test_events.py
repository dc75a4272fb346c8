"""The live event bus: cross-thread delivery, drop-oldest buffers, clean unsubscribe; the one
buffer class shared by bus subscriptions and the admin page's streams."""

from __future__ import annotations

import asyncio
import threading

from gateway.live.aggregator import LiveAggregator, Load
from gateway.live.event_types import EventsDropped, FeedEvent, RoundCompleted
from gateway.live.events import EventBuffer, EventBus


def step(i: int) -> RoundCompleted:
    return RoundCompleted(
        request_id="r", round=i, policy="normalhedge", drafter="a", drafted=6, accepted=1,
        committed=2, completion_tokens=2 * (i + 1), mean_acceptance_length=2.0,
        tokens_per_s=10.0, weights={"a": 1.0}, batch_rows=1, plain=False, regret=None,
        regret_unit="tokens", feedback_windows=0,
    )  # fmt: skip


def rounds(events: list[FeedEvent]) -> list[int]:
    return [e.round for e in events if isinstance(e, RoundCompleted)]


def test_events_published_from_another_thread_arrive_in_order() -> None:
    async def main() -> list[FeedEvent]:
        bus = EventBus()
        sub = bus.subscribe()
        worker = threading.Thread(target=lambda: [bus.publish(step(i)) for i in range(5)])
        worker.start()
        worker.join()
        got = [await asyncio.wait_for(sub.__anext__(), 2) for _ in range(5)]
        await sub.aclose()
        return got

    assert rounds(asyncio.run(main())) == [0, 1, 2, 3, 4]


def test_a_slow_subscriber_loses_the_oldest_and_is_told() -> None:
    async def main() -> list[FeedEvent]:
        bus = EventBus()
        sub = bus.subscribe(buffer_size=3)
        for i in range(10):
            bus.publish(step(i))
        out = [await sub.__anext__() for _ in range(4)]
        await sub.aclose()
        return out

    first, *rest = asyncio.run(main())
    assert isinstance(first, EventsDropped) and first.count == 7
    assert rounds(rest) == [7, 8, 9]
    assert [e.seq for e in rest if isinstance(e, RoundCompleted)] == [8, 9, 10]
    # The stamp reaches the wire after the event's own fields, as the page reads it.
    assert list(rest[0].to_json())[-2:] == ["seq", "ts"]


def test_no_subscriber_means_no_work_and_closing_ends_iteration() -> None:
    async def main() -> list[FeedEvent]:
        bus = EventBus()
        bus.bind(asyncio.get_running_loop())
        bus.publish(step(0))  # nobody listens: dropped
        assert not bus.has_subscribers
        sub = bus.subscribe()
        assert bus.has_subscribers
        await sub.aclose()
        assert not bus.has_subscribers
        return [e async for e in sub]

    assert asyncio.run(main()) == []


def test_an_event_buffer_drops_the_oldest_counts_them_and_ends_when_closed() -> None:
    async def main() -> tuple[object, ...]:
        buffer = EventBuffer(2)
        for i in range(5):
            buffer.offer({"i": i})
        drained = buffer.drain()
        buffer.offer({"i": 9})
        await asyncio.wait_for(buffer.wait(), 1)  # an event is there: returns at once
        first = buffer.pop()
        buffer.close()
        await asyncio.wait_for(buffer.wait(), 1)  # closed: returns although empty
        return drained, first, buffer.pop(), buffer.lost

    drained, first, after_close, lost = asyncio.run(main())
    assert drained == ([{"i": 3}, {"i": 4}], 3)
    assert first == {"i": 9} and after_close is None and lost == 0


def test_bus_subscriptions_and_page_streams_share_one_buffer_class() -> None:
    async def main() -> tuple[object, object]:
        subscription = EventBus().subscribe()
        page = LiveAggregator(lambda: Load(0, 1, 1)).listen()
        return subscription.buffer, page

    bus_side, page_side = asyncio.run(main())
    assert type(bus_side) is type(page_side) is EventBuffer
