"""The admin page (`/admin`) and the live data it shows: a push stream of requests, an
overview snapshot and a bounded history of finished requests.

Routes:

    GET /admin                  307 to `/admin/` (relative, so a path prefix survives)
    GET /admin/                 the page (static `admin_ui/index.html`); no auth: it holds no data
    GET /admin/static/{file}    its scripts and styles, from `admin_ui/` only
    GET /admin/api/live         SSE: `snapshot` first, then `events` batches (admin key)
    GET /admin/api/overview     load, MAT and tokens/s over time, per-drafter usage (admin key)
    GET /admin/api/requests     recently finished requests, newest first (admin key)

Auth: every `/admin/api/*` route takes the admin key as `Authorization: Bearer <key>`, checked in
constant time by `gateway.http.auth.require_admin_key`. A wrong or missing key answers 401; a server
started without an admin key answers 403 `admin_disabled` (the admin API is never open). The key
never travels in a URL: the page reads the stream with `fetch()` and a `ReadableStream`, not
`EventSource`, which cannot send headers.

Live data comes from `gateway.live.aggregator.LiveAggregator`, the event bus's subscriber.
Each page stream coalesces events for `FLUSH_S` and sends them as one SSE frame, so a hundred
concurrent requests cost the browser at most ten frames a second. `gateway.app` builds the
aggregator and subscribes it at start-up, so the overview counts requests served before anyone
looks, and only when an admin key is configured: otherwise nobody may read the data, and the
engine worker skips building per-round events altogether (the bus has no subscriber).

History: finished requests are kept in memory (the last `HISTORY_SIZE`). When request logging
to the database is wired (the registry has started its `request_logs` writer),
`/admin/api/requests` reads `request_logs` instead, so history survives restarts and spans
replicas.
"""

from __future__ import annotations

import asyncio
import json
import math
import mimetypes
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Depends, Query
from fastapi.responses import FileResponse, RedirectResponse, Response
from sse_starlette import EventSourceResponse, ServerSentEvent

from gateway.errors import APIError
from gateway.http.auth import require_admin_key
from gateway.http.deps import (
    AggregatorDep,
    RegistryLinkDep,
    RequestLogDep,
    RunnerDep,
    SettingsDep,
)
from gateway.live.aggregator import HISTORY_SIZE, LiveAggregator
from gateway.live.traces import step_order
from gateway.runner import EngineRunner

ADMIN_UI_DIR = Path(__file__).resolve().parents[3] / "admin_ui"
STATIC_SUFFIXES = {".html", ".js", ".css", ".svg", ".png", ".woff2", ".txt", ".map"}

FLUSH_S = 0.1  # page streams coalesce events for this long

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


def _drafter_ids(runner: EngineRunner) -> list[str]:
    info = runner.info
    return list(info.drafter_ids) if info is not None else []


def _snapshot(aggregator: LiveAggregator, runner: EngineRunner) -> dict[str, Any]:
    """The live snapshot plus every drafter's kind (the page colours model-free drafters by
    kind)."""
    snapshot: dict[str, Any] = aggregator.live_snapshot(_drafter_ids(runner))
    snapshot["drafter_kinds"] = runner.known_kinds
    return snapshot


router = APIRouter(tags=["admin"])
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
    try:
        path = (root / name).resolve()
        found = path.is_relative_to(root) and path.suffix in STATIC_SUFFIXES and path.is_file()
    except (ValueError, OSError):  # a NUL byte, a name too long: no such file either
        found = False
    if not found:
        raise APIError(f"No static file {name!r}.", status=404, code="not_found")
    media_type = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    if path.suffix == ".js":
        media_type = "text/javascript"  # module scripts need a JavaScript MIME type
    return FileResponse(path, media_type=media_type, headers=PAGE_HEADERS)


# ---- admin data -----------------------------------------------------------------------------


@api.get("/live")
async def live(
    aggregator: AggregatorDep, runner: RunnerDep, settings: SettingsDep
) -> EventSourceResponse:
    """The event stream of the page: a `snapshot`, then `events` frames (JSON arrays)."""
    # Register and snapshot in one synchronous step: nothing can slip between the two.
    listener = aggregator.listen()
    first = _snapshot(aggregator, runner)

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
                    snapshot = _snapshot(aggregator, runner)
                    yield ServerSentEvent(dumps(snapshot), event="snapshot")
                elif events:
                    yield ServerSentEvent(dumps([e.to_json() for e in events]), event="events")
        finally:
            aggregator.unlisten(listener)

    return EventSourceResponse(
        frames(),
        sep="\n",
        ping=settings.sse_ping_s or None,
        # Proxies (nginx) must not buffer a live stream.
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


@api.get("/overview")
async def overview(aggregator: AggregatorDep, runner: RunnerDep) -> Response:
    """Load, totals, the last minute, 2-second series and per-drafter usage."""
    body = aggregator.overview()
    body["model"] = runner.info.model_name if runner.info is not None else None
    body["ready"] = runner.ready
    body["drafters"] = _drafter_ids(runner)
    body["drafter_kinds"] = runner.known_kinds
    return _json(body)


@api.get("/requests")
async def recent_requests(
    aggregator: AggregatorDep,
    request_log: RequestLogDep,
    registry: RegistryLinkDep,
    limit: int = Query(default=HISTORY_SIZE, ge=1, le=1000),
) -> Response:
    """Finished requests, newest first: from `request_logs` when logging is on, else memory."""
    if request_log is not None and registry.engine is not None:
        rows = await asyncio.to_thread(_logged_requests, registry.engine, limit)
        if rows is not None:
            return _json({"data": rows, "count": len(rows), "source": "database"})
    rows = aggregator.recent_requests(limit)
    return _json({"data": rows, "count": len(rows), "source": "memory"})


def _logged_requests(engine: Any, limit: int) -> list[dict[str, Any]] | None:
    """Rows of `request_logs` in the page's request shape; None when the database fails."""
    from drafter_registry.db import make_session_factory
    from drafter_registry.request_log import logged_regret, plain_step_indices
    from drafter_registry.request_log import recent_requests as read_recent

    try:
        with make_session_factory(engine)() as session:
            logs = read_recent(session, limit=limit)
    except Exception:  # the database being down must not break the page: fall back
        return None
    out = []
    for log in logs:
        choices = list(log.drafter_choices or [])
        # Plain rounds (the learner's plain arm), put back between the speculative ones.
        order = step_order(len(choices), plain_step_indices(log))
        if order is None:  # no step, or indices that do not fit: the rounds alone
            order = list(range(len(choices)))
        plain = sum(k is None for k in order)
        steps = log.rounds + plain
        regret, unit = logged_regret(log)
        out.append(
            {
                "request_id": log.request_id,
                "policy": log.policy,
                "status": "finished" if log.status == "ok" else "failed",
                "started_at": log.created_at.timestamp() if log.created_at else None,
                "prompt_tokens": log.prompt_tokens,
                "completion_tokens": log.completion_tokens,
                "rounds": steps,  # speculative rounds and plain steps, as the live page's
                "mean_acceptance_length": log.mat,
                "regret": regret,
                "regret_unit": unit,
                "elapsed_s": log.latency_ms / 1000 if log.latency_ms is not None else None,
                "drafter_per_round": [None if k is None else choices[k] for k in order],
                "plain_per_round": [k is None for k in order],
                "plain_rounds": plain,
                "first_round": max(0, steps - len(order)),
                "error": None if log.status == "ok" else log.status,
                "prompt": log.prompt,  # None unless the operator enabled log_prompts
            }
        )
    return out


router.include_router(api)
