"""OpenAI-compatible routes: `/v1/models`, `/v1/chat/completions`, `/v1/completions`,
`/v1/responses` (create; retrieve, delete, cancel and list input items of a stored response).

Each generation route makes one call to its serving class, which answers the body or the
frames to stream (`gateway/openai/serving.py`); a refusal is raised before either."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from typing import Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse, Response
from sse_starlette import EventSourceResponse
from starlette.background import BackgroundTask

from gateway.config import Settings
from gateway.errors import invalid_request
from gateway.http.auth import key_scope, require_api_key
from gateway.http.deps import (
    ChatServingDep,
    CompletionServingDep,
    ModelsServingDep,
    ResponsesServingDep,
)
from gateway.openai.protocol import ChatCompletionRequest, CompletionRequest
from gateway.openai.protocol_responses import ResponsesRequest
from gateway.openai.response_store import response_not_found
from gateway.openai.serving import JobStream

router = APIRouter(prefix="/v1", tags=["openai"], dependencies=[Depends(require_api_key)])
Result = dict[str, Any] | JobStream


@router.get("/models")
async def list_models(models: ModelsServingDep) -> dict[str, Any]:
    """List the served model (drafters are listed under its `spec`, not as models)."""
    return models.models()


@router.get("/models/{model_id:path}")
async def retrieve_model(model_id: str, models: ModelsServingDep) -> dict[str, Any]:
    """Describe one model; unknown ids answer 404 `model_not_found`."""
    return models.model(model_id)


@router.post("/chat/completions", response_model=None)
async def create_chat_completion(
    body: ChatCompletionRequest, request: Request, serving: ChatServingDep
) -> Response:
    """Chat completion, streamed as SSE when `stream` is true."""
    work = serving.create(body, arrival=_arrival(request), scope=key_scope(request))
    return _response(await _unless_disconnected(request, work), serving.settings)


@router.post("/completions", response_model=None)
async def create_completion(
    body: CompletionRequest, request: Request, serving: CompletionServingDep
) -> Response:
    """Legacy text completion, streamed as SSE when `stream` is true."""
    work = serving.create(body, arrival=_arrival(request), scope=key_scope(request))
    return _response(await _unless_disconnected(request, work), serving.settings)


@router.post("/responses", response_model=None)
async def create_response(
    body: ResponsesRequest, request: Request, serving: ResponsesServingDep
) -> Response:
    """The Responses API, streamed as typed SSE events when `stream` is true."""
    work = serving.create(body, arrival=_arrival(request), scope=key_scope(request))
    return _response(await _unless_disconnected(request, work), serving.settings)


@router.get("/responses/{response_id}")
async def retrieve_response(
    response_id: str, request: Request, serving: ResponsesServingDep
) -> dict[str, Any]:
    """A stored response; 404 when absent, expired, deleted or another API key's."""
    record = await serving.store.load(response_id, key_scope(request))
    if record is None:
        raise response_not_found(response_id)
    return record.body


@router.delete("/responses/{response_id}")
async def delete_response(
    response_id: str, request: Request, serving: ResponsesServingDep
) -> dict[str, Any]:
    """Delete a stored response (404 as for retrieve)."""
    if not await serving.store.delete(response_id, key_scope(request)):
        raise response_not_found(response_id)
    return {"id": response_id, "object": "response.deleted", "deleted": True}


@router.post("/responses/{response_id}/cancel")
async def cancel_response(
    response_id: str, request: Request, serving: ResponsesServingDep
) -> dict[str, Any]:
    """Cancel a stored response still in flight (its engine requests are aborted); the
    response as it ends, status `cancelled`. 404 as for retrieve; 400 once it has ended."""
    return await serving.cancel(response_id, key_scope(request))


@router.get("/responses/{response_id}/input_items")
async def list_input_items(
    response_id: str, request: Request, serving: ResponsesServingDep,
    after: str | None = None, before: str | None = None,
    limit: int = Query(default=20), order: str = "desc",
) -> dict[str, Any]:
    """The stored response's input items (OpenAI's cursor page: `order` desc by default,
    `limit` 1-100, `after` / `before` an item id)."""
    if not 1 <= limit <= 100:
        raise invalid_request("limit must be between 1 and 100", param="limit")
    if order not in ("asc", "desc"):
        raise invalid_request('order must be "asc" or "desc"', param="order")
    record = await serving.store.load(response_id, key_scope(request))
    if record is None:
        raise response_not_found(response_id)
    items = list(record.input_items)
    if order == "desc":
        items.reverse()
    ids = [item.get("id") for item in items]
    for cursor, param in ((after, "after"), (before, "before")):
        if cursor is not None and cursor not in ids:
            raise invalid_request(f"No input item with id '{cursor}'.", param=param)
    start = ids.index(after) + 1 if after is not None else 0
    end = ids.index(before) if before is not None else len(items)
    items = items[start:max(start, end)]
    page = items[:limit]
    return {
        "object": "list",
        "data": page,
        "first_id": page[0]["id"] if page else None,
        "last_id": page[-1]["id"] if page else None,
        "has_more": len(items) > limit,
    }


def _arrival(request: Request) -> float:
    arrival: float = request.scope.get("state", {}).get("arrival", time.monotonic())
    return arrival


def _response(result: Result | None, settings: Settings) -> Response:
    if result is None:
        return Response(status_code=499)  # nobody is listening; the job was aborted
    if isinstance(result, dict):
        return JSONResponse(result)
    return EventSourceResponse(
        result.frames,
        sep="\n",
        ping=settings.sse_ping_s,
        # Graceful shutdown: let in-flight streams finish instead of cutting them.
        shutdown_grace_period=settings.drain_timeout_s,
        # Runs even when the client left before the first frame was produced.
        background=BackgroundTask(result.release),
    )


async def _unless_disconnected(request: Request, work: Awaitable[Result]) -> Result | None:
    """Race the work against `http.disconnect` (vLLM's `with_cancellation`); cancel on loss.
    A stream is handed over as soon as it is admitted; its response then watches the client."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_wait_disconnect(request))
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
    if not task.done():
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return None
    return task.result()


async def _wait_disconnect(request: Request) -> None:
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return
