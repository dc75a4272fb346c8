"""The admin page (`/admin`) and the live data it shows: a push stream of requests, an
overview snapshot and a bounded history of finished requests.

Routes:

    GET /admin                  307 to `/admin/` (relative, so a path prefix survives)
    GET /admin/                 the page (static `admin_ui/index.html`); no auth: it holds no data
    GET /admin/static/{file}    its scripts and styles, from `admin_ui/` only
    GET /admin/api/live         SSE: `snapshot` first, then `events` batches (admin key)
    GET /admin/api/overview     load, MAT and tokens/s over time, per-drafter usage (admin key)
    GET /admin/api/requests     recently finished requests, newest first (admin key)

Auth: every `/admin/api/*` route takes the admin key as `Authorization: Bearer <key>`, checked
in constant time by `gateway.auth.require_admin_key`. A wrong or missing key answers 401; a server
started without an admin key answers 403 `admin_disabled` (the admin API is never open). The
key never travels in a URL: the page reads the stream with `fetch()` and a `ReadableStream`,
not `EventSource`, which cannot send headers.

Live data: `LiveAggregator` is the event bus's one long-lived subscriber. It folds the
per-round events (see `gateway.events`) into bounded state (active request traces, a history
ring of finished requests, 2-second time buckets) and re-publishes every event to the page
streams it serves. Because a page stream registers and takes its snapshot in one synchronous
step on the event loop, a page sees every event after its snapshot exactly once, with no gap.
Each page stream coalesces events for `FLUSH_S` and sends them as one SSE frame, so a hundred
concurrent requests cost the browser at most ten frames a second. A page stream that falls
`LISTENER_BUFFER` events behind is sent a fresh snapshot instead of the events it lost. The
aggregator subscribes at start-up only when an admin key is configured; without one the engine
worker skips building per-round events altogether (the bus has no subscriber).

History: finished requests are kept in memory (the last `HISTORY_SIZE`). When request logging
to the database is wired (`app.state.request_log` set), `/admin/api/requests` reads
`request_logs` instead, so history survives restarts and spans replicas.

Queue depth is derived from the runner's public counters: `queued = in_flight - max_running`
when positive, because admission always fills running slots before anything waits.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import math
import mimetypes
import time
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Depends, FastAPI, Query, Request
from fastapi.responses import FileResponse, RedirectResponse, Response
from sse_starlette import EventSourceResponse, ServerSentEvent

from gateway.auth import require_admin_key
from gateway.errors import APIError
from gateway.events import EventBus

ADMIN_UI_DIR = Path(__file__).resolve().parents[2] / "admin_ui"
STATIC_SUFFIXES = {".html", ".js", ".css", ".svg", ".png", ".woff2", ".txt", ".map"}

HISTORY_SIZE = 200  # finished requests kept in memory
MAX_ACTIVE = 1024  # traces of running requests (a lost `request_finished` cannot leak)
MAX_ROUNDS = 4096  # rounds kept per trace; older rounds are dropped from the front
BUCKET_S = 2.0  # width of one overview time bucket
SERIES_BUCKETS = 180  # 6 minutes of overview history
RECENT_S = 60.0  # the "recent" window of the overview numbers
STALE_S = 120.0  # a trace idle this long past the request deadline is evicted
FLUSH_S = 0.1  # page streams coalesce events for this long
LISTENER_BUFFER = 5000  # events a page stream may fall behind before it gets a snapshot

# The page is static and same-origin; this policy forbids inline scripts, so even a missed
# escape could not run injected markup (defence in depth behind textContent-only rendering).
PAGE_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'none'; "
        "frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


# ---- per-request traces ---------------------------------------------------------------------


@dataclass
class RequestTrace:
    """What the page shows about one request, built from its events."""

    request_id: str
    policy: str | None = None
    drafters: list[str] = field(default_factory=list)
    prompt_tokens: int | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    started_at: float = 0.0
    updated_at: float = 0.0
    status: str = "running"  # running | finished | aborted | failed
    first_round: int = 0  # round index of drafter_per_round[0] (older rounds were dropped)
    last_round: int = -1
    drafter_per_round: list[str | None] = field(default_factory=list)
    accepted_per_round: list[int] = field(default_factory=list)
    committed_per_round: list[int] = field(default_factory=list)
    completion_tokens: int = 0
    mat: float | None = None
    tokens_per_s: float | None = None
    weights: dict[str, float] = field(default_factory=dict)
    regret_tokens: float | None = None
    regret_curve: list[list[float]] = field(default_factory=list)  # [feedback window, tokens]
    finish_reason: str | None = None
    error: str | None = None
    elapsed_s: float | None = None
    finished_at: float | None = None

    def apply_round(self, event: dict[str, Any]) -> None:
        index = int(event.get("round", self.last_round + 1))
        if index <= self.last_round:
            return  # a duplicate (re-delivered after a resync)
        if not self.drafter_per_round:
            self.first_round = index
        self.last_round = index
        self.drafter_per_round.append(event.get("drafter"))
        self.accepted_per_round.append(int(event.get("accepted") or 0))
        self.committed_per_round.append(int(event.get("committed") or 0))
        overflow = len(self.drafter_per_round) - MAX_ROUNDS
        if overflow > 0:
            del self.drafter_per_round[:overflow]
            del self.accepted_per_round[:overflow]
            del self.committed_per_round[:overflow]
            self.first_round += overflow
        self.policy = event.get("policy", self.policy)
        self.completion_tokens = int(event.get("completion_tokens") or 0)
        self.mat = event.get("mean_acceptance_length")
        self.tokens_per_s = event.get("tokens_per_s")
        self.weights = dict(event.get("weights") or {})
        windows = int(event.get("feedback_windows") or 0)
        regret = event.get("regret_tokens")
        if (
            regret is not None
            and windows
            and (not self.regret_curve or windows > self.regret_curve[-1][0])
        ):
            self.regret_curve.append([windows, float(regret)])
            del self.regret_curve[:-MAX_ROUNDS]
        self.regret_tokens = regret

    def apply_finished(self, event: dict[str, Any]) -> None:
        self.finish_reason = event.get("finish_reason")
        self.error = event.get("error")
        self.elapsed_s = event.get("elapsed_s")
        self.finished_at = event.get("ts", time.time())
        if self.error:
            self.status = "failed"
        elif self.finish_reason is None:
            self.status = "aborted"  # client gone, or ended by a stop string
        else:
            self.status = "finished"
        stats = event.get("stats")
        if not isinstance(stats, dict):
            return
        # The final statistics are authoritative: they hold every round and the full curve.
        self.policy = stats.get("policy", self.policy)
        self.completion_tokens = int(stats.get("completion_tokens") or self.completion_tokens)
        self.prompt_tokens = stats.get("prompt_tokens", self.prompt_tokens)
        self.mat = stats.get("mean_acceptance_length", self.mat)
        self.regret_tokens = stats.get("regret_tokens", self.regret_tokens)
        self.weights = dict(stats.get("final_weights") or self.weights)
        choices = list(stats.get("drafter_choices") or [])[-MAX_ROUNDS:]
        accepted = list(stats.get("accepted_per_round") or [])[-MAX_ROUNDS:]
        if choices and len(choices) == len(accepted):
            rounds = int(stats.get("rounds") or len(choices))
            self.first_round = rounds - len(choices)
            self.last_round = max(self.last_round, rounds - 1)
            if len(self.committed_per_round) != len(choices):
                # Committed tokens are not in the final stats; accepted + 1 bonus is exact
                # except for a stop-truncated last round.
                self.committed_per_round = [a + 1 for a in accepted]
            self.drafter_per_round, self.accepted_per_round = choices, accepted
        curve = stats.get("regret_curve")
        if isinstance(curve, list):
            self.regret_curve = [[i + 1, float(v)] for i, v in enumerate(curve)][-MAX_ROUNDS:]

    def public(self) -> dict[str, Any]:
        # Copies, not references: a snapshot is serialized later (after an await) while
        # rounds keep arriving, and must still describe one moment (rounds == len(choices)).
        return {
            "request_id": self.request_id,
            "policy": self.policy,
            "drafters": list(self.drafters),
            "prompt_tokens": self.prompt_tokens,
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            "started_at": self.started_at,
            "updated_at": self.updated_at,
            "finished_at": self.finished_at,
            "status": self.status,
            "rounds": self.last_round + 1,
            "first_round": self.first_round,
            "drafter_per_round": list(self.drafter_per_round),
            "accepted_per_round": list(self.accepted_per_round),
            "committed_per_round": list(self.committed_per_round),
            "completion_tokens": self.completion_tokens,
            "mean_acceptance_length": self.mat,
            "tokens_per_s": self.tokens_per_s,
            "weights": dict(self.weights),
            "regret_tokens": self.regret_tokens,
            "regret_curve": [list(p) for p in self.regret_curve],
            "finish_reason": self.finish_reason,
            "error": self.error,
            "elapsed_s": self.elapsed_s,
        }


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


@dataclass
class _Bucket:
    end: float = 0.0
    rounds: int = 0
    tokens: int = 0
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


# ---- page streams ---------------------------------------------------------------------------


class Listener:
    """One page stream's bounded buffer; the aggregator offers, the SSE handler drains."""

    def __init__(self, maxsize: int = LISTENER_BUFFER) -> None:
        self._events: collections.deque[dict[str, Any]] = collections.deque(maxlen=maxsize)
        self._ready = asyncio.Event()
        self.lost = 0
        self.closed = False

    def offer(self, event: dict[str, Any]) -> None:
        if len(self._events) == self._events.maxlen:
            self.lost += 1
        self._events.append(event)
        self._ready.set()

    async def wait(self) -> None:
        while not self._events and not self.closed:
            self._ready.clear()
            await self._ready.wait()

    def drain(self) -> tuple[list[dict[str, Any]], int]:
        events, lost = list(self._events), self.lost
        self._events.clear()
        self.lost = 0
        return events, lost

    def close(self) -> None:
        self.closed = True
        self._ready.set()


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
        self.tokens = 0
        self.events_dropped = 0
        self.per_drafter: dict[str, _Usage] = {}
        self.listeners: set[Listener] = set()
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

    async def _consume(self, subscription: Any) -> None:
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

    def apply(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "round":
            self._on_round(event)
        elif kind == "request_started":
            self._trace(event)
        elif kind == "request_finished":
            self._on_finished(event)
        elif kind == "dropped":
            self.events_dropped += int(event.get("count") or 0)
        else:
            return
        for listener in self.listeners:
            listener.offer(event)

    def _trace(self, event: dict[str, Any]) -> RequestTrace:
        request_id = str(event.get("request_id"))
        trace = self.active.get(request_id)
        now = float(event.get("ts") or self._clock())
        if trace is None:
            trace = RequestTrace(request_id, started_at=now)
            self.active[request_id] = trace
            self.totals["requests_started"] += 1
            while len(self.active) > MAX_ACTIVE:
                self.active.popitem(last=False)
        if event.get("type") == "request_started":
            trace.policy = event.get("policy")
            trace.drafters = [str(d) for d in event.get("drafters") or []]
            trace.prompt_tokens = event.get("prompt_tokens")
            trace.max_tokens = event.get("max_tokens")
            trace.temperature = event.get("temperature")
        trace.updated_at = now
        return trace

    def _on_round(self, event: dict[str, Any]) -> None:
        trace = self._trace(event)
        before = trace.last_round
        trace.apply_round(event)
        if trace.last_round == before:
            return
        accepted = int(event.get("accepted") or 0)
        committed = int(event.get("committed") or 0)
        self.rounds += 1
        self.tokens += committed
        self.current.rounds += 1
        self.current.tokens += committed
        drafter = event.get("drafter")
        if drafter is not None:
            name = str(drafter)
            self.per_drafter.setdefault(name, _Usage()).add(accepted, committed)
            self.current.per_drafter.setdefault(name, _Usage()).add(accepted, committed)

    def _on_finished(self, event: dict[str, Any]) -> None:
        request_id = str(event.get("request_id"))
        trace = self.active.pop(request_id, None)
        if trace is None:  # ended before its first round (queued, aborted, rejected)
            trace = RequestTrace(request_id, started_at=float(event.get("ts") or self._clock()))
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

    def listen(self) -> Listener:
        listener = Listener()
        self.listeners.add(listener)
        return listener

    def unlisten(self, listener: Listener) -> None:
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
        now = self._clock()
        load = self._load()
        buckets = list(self.series)
        recent = [b for b in buckets if b.end >= now - RECENT_S] + [self.current]
        recent_rounds = sum(b.rounds for b in recent)
        recent_tokens = sum(b.tokens for b in recent)
        recent_span = min(RECENT_S, max(now - self.started_at, 1e-9))
        recent_usage: dict[str, _Usage] = {}
        for bucket in recent:
            for name, usage in bucket.per_drafter.items():
                acc = recent_usage.setdefault(name, _Usage())
                acc.rounds += usage.rounds
                acc.accepted += usage.accepted
                acc.committed += usage.committed
        chosen = sum(u.rounds for u in self.per_drafter.values())
        recent_chosen = sum(u.rounds for u in recent_usage.values())
        per_drafter = [
            {
                "id": name,
                "rounds": usage.rounds,
                "share": _ratio(usage.rounds, chosen),
                "mean_accepted": _ratio(usage.accepted, usage.rounds),
                "mat": _ratio(usage.committed, usage.rounds),
                "recent_rounds": recent_usage.get(name, _Usage()).rounds,
                "recent_share": _ratio(recent_usage.get(name, _Usage()).rounds, recent_chosen),
            }
            for name, usage in sorted(self.per_drafter.items())
        ]
        return {
            "ts": now,
            "uptime_s": now - self.started_at,
            "load": {
                "in_flight": load.in_flight,
                "running": load.running,
                "queued": load.queued,
                "max_running": load.max_running,
                "max_queue": load.max_queue,
                "live_streams": len(self.listeners),
            },
            "totals": {
                **self.totals,
                "rounds": self.rounds,
                "tokens": self.tokens,
                "mat": _ratio(self.tokens, self.rounds),
                "events_dropped": self.events_dropped,
            },
            "recent": {
                "window_s": RECENT_S,
                "rounds": recent_rounds,
                "tokens": recent_tokens,
                "mat": _ratio(recent_tokens, recent_rounds),
                "tokens_per_s": recent_tokens / recent_span,
            },
            "series": {
                "bucket_s": BUCKET_S,
                "t": [b.end for b in buckets],
                "mat": [_ratio(b.tokens, b.rounds) for b in buckets],
                "tokens_per_s": [b.tokens / BUCKET_S for b in buckets],
                "rounds": [b.rounds for b in buckets],
                "in_flight": [b.in_flight for b in buckets],
                "queue_depth": [b.queued for b in buckets],
            },
            "per_drafter": per_drafter,
        }


# ---- wiring ---------------------------------------------------------------------------------


def _load_of(app: FastAPI) -> Callable[[], Load]:
    runner = app.state.runner

    def load() -> Load:
        return Load(runner.in_flight, runner.max_running, runner.max_queue)

    return load


def _new_aggregator(app: FastAPI) -> LiveAggregator:
    timeout = float(getattr(app.state.settings, "request_timeout_s", 600.0))
    aggregator = LiveAggregator(_load_of(app), stale_after_s=timeout + STALE_S)
    aggregator.start(app.state.events)
    app.state.admin_live = aggregator
    return aggregator


@contextlib.asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Subscribe at start-up, so the overview counts requests served before anyone looks.

    Only with an admin key configured: otherwise nobody may read the data, and without a
    subscriber the engine worker does not even build the per-round events.
    """
    if not app.state.admin_keys.enabled:
        yield
        return
    aggregator = _new_aggregator(app)
    try:
        yield
    finally:
        await aggregator.stop()
        app.state.admin_live = None


def get_aggregator(request: Request) -> LiveAggregator:
    aggregator: LiveAggregator | None = getattr(request.app.state, "admin_live", None)
    if aggregator is None:
        # FastAPI before 0.112.2 does not run an included router's lifespan: start on first use.
        aggregator = _new_aggregator(request.app)
    return aggregator


def _finite(value: Any) -> Any:
    """JSON has no NaN or infinity (`JSON.parse` rejects them): send null instead."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def dumps(value: Any) -> str:
    try:
        return json.dumps(value, allow_nan=False, separators=(",", ":"))
    except ValueError:
        return json.dumps(_finite(value), separators=(",", ":"))


def _json(value: Any) -> Response:
    return Response(
        dumps(value), media_type="application/json", headers={"Cache-Control": "no-store"}
    )


def _drafter_ids(request: Request) -> list[str]:
    info = request.app.state.runner.info
    return list(info.drafter_ids) if info is not None else []


router = APIRouter(tags=["admin"], lifespan=lifespan)
api = APIRouter(prefix="/admin/api", dependencies=[Depends(require_admin_key)])


# ---- the page -------------------------------------------------------------------------------


@router.get("/admin", include_in_schema=False)
async def admin_redirect() -> Response:
    return RedirectResponse("admin/", status_code=307)


@router.get("/admin/", include_in_schema=False)
async def admin_page() -> Response:
    return FileResponse(ADMIN_UI_DIR / "index.html", media_type="text/html", headers=PAGE_HEADERS)


@router.get("/admin/static/{name:path}", include_in_schema=False)
async def admin_static(name: str) -> Response:
    root = ADMIN_UI_DIR.resolve()
    path = (root / name).resolve()
    if not path.is_relative_to(root) or path.suffix not in STATIC_SUFFIXES or not path.is_file():
        raise APIError(f"No static file {name!r}.", status=404, code="not_found")
    media_type = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    if path.suffix == ".js":
        media_type = "text/javascript"  # module scripts need a JavaScript MIME type
    return FileResponse(path, media_type=media_type, headers=PAGE_HEADERS)


# ---- admin data -----------------------------------------------------------------------------


@api.get("/live")
async def live(request: Request) -> EventSourceResponse:
    """The event stream of the page: a `snapshot`, then `events` frames (JSON arrays)."""
    aggregator = get_aggregator(request)
    # Register and snapshot in one synchronous step: nothing can slip between the two.
    listener = aggregator.listen()
    first = aggregator.live_snapshot(_drafter_ids(request))

    async def frames() -> AsyncIterator[ServerSentEvent]:
        try:
            yield ServerSentEvent(dumps(first), event="snapshot")
            while True:
                await listener.wait()
                if listener.closed:
                    return
                await asyncio.sleep(FLUSH_S)  # coalesce: one frame per FLUSH_S at most
                events, lost = listener.drain()
                if lost:
                    snapshot = aggregator.live_snapshot(_drafter_ids(request))
                    yield ServerSentEvent(dumps(snapshot), event="snapshot")
                elif events:
                    yield ServerSentEvent(dumps(events), event="events")
        finally:
            aggregator.unlisten(listener)

    settings = request.app.state.settings
    return EventSourceResponse(
        frames(),
        sep="\n",
        ping=settings.sse_ping_s or None,
        # Proxies (nginx) must not buffer a live stream.
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


@api.get("/overview")
async def overview(request: Request) -> Response:
    """Load, totals, the last minute, 2-second series and per-drafter usage."""
    runner = request.app.state.runner
    body = get_aggregator(request).overview()
    body["model"] = runner.info.model_name if runner.info is not None else None
    body["ready"] = runner.ready
    body["drafters"] = _drafter_ids(request)
    return _json(body)


@api.get("/requests")
async def recent_requests(
    request: Request, limit: int = Query(default=HISTORY_SIZE, ge=1, le=1000)
) -> Response:
    """Finished requests, newest first: from `request_logs` when logging is on, else memory."""
    if getattr(request.app.state, "request_log", None) is not None:
        rows = await asyncio.to_thread(_logged_requests, request.app, limit)
        if rows is not None:
            return _json({"data": rows, "count": len(rows), "source": "database"})
    rows = get_aggregator(request).recent_requests(limit)
    return _json({"data": rows, "count": len(rows), "source": "memory"})


def _logged_requests(app: FastAPI, limit: int) -> list[dict[str, Any]] | None:
    """Rows of `request_logs` in the page's request shape; None when the database fails."""
    from drafter_registry.db import make_session_factory
    from drafter_registry.request_log import recent_requests as read_recent

    engine = app.state.registry.engine
    if engine is None:
        return None
    try:
        with make_session_factory(engine)() as session:
            logs = read_recent(session, limit=limit)
    except Exception:  # the database being down must not break the page: fall back
        return None
    out = []
    for log in logs:
        choices = list(log.drafter_choices or [])
        out.append(
            {
                "request_id": log.request_id,
                "policy": log.policy,
                "status": "finished" if log.status == "ok" else "failed",
                "started_at": log.created_at.timestamp() if log.created_at else None,
                "prompt_tokens": log.prompt_tokens,
                "completion_tokens": log.completion_tokens,
                "rounds": log.rounds,
                "mean_acceptance_length": log.mat,
                "regret_tokens": log.regret_tokens,
                "elapsed_s": log.latency_ms / 1000 if log.latency_ms is not None else None,
                "drafter_per_round": choices,
                "first_round": max(0, log.rounds - len(choices)),
                "error": None if log.status == "ok" else log.status,
                "prompt": log.prompt,  # None unless the operator enabled log_prompts
            }
        )
    return out


router.include_router(api)
