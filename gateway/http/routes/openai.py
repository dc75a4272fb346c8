"""OpenAI-compatible routes: `/v1/models`, `/v1/chat/completions`, `/v1/completions`."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response
from sse_starlette import EventSourceResponse
from starlette.background import BackgroundTask

from gateway.http.auth import key_scope, require_api_key
from gateway.http.deps import ServingDep
from gateway.openai.protocol import ChatCompletionRequest, CompletionRequest
from gateway.openai.serving import Job, Serving

router = APIRouter(prefix="/v1", tags=["openai"], dependencies=[Depends(require_api_key)])


@router.get("/models")
async def list_models(serving: ServingDep) -> dict[str, Any]:
    """List the served model (drafters are listed under its `spec`, not as models)."""
    return serving.models()


@router.get("/models/{model_id:path}")
async def retrieve_model(model_id: str, serving: ServingDep) -> dict[str, Any]:
    """Describe one model; unknown ids answer 404 `model_not_found`."""
    return serving.model(model_id)


@router.post("/chat/completions", response_model=None)
async def create_chat_completion(
    body: ChatCompletionRequest, request: Request, serving: ServingDep
) -> Response:
    """Chat completion, streamed as SSE when `stream` is true."""
    job = await serving.prepare(body, arrival=_arrival(request), scope=key_scope(request))
    return await _respond(job, request, serving)


@router.post("/completions", response_model=None)
async def create_completion(
    body: CompletionRequest, request: Request, serving: ServingDep
) -> Response:
    """Legacy text completion, streamed as SSE when `stream` is true."""
    job = await serving.prepare(body, arrival=_arrival(request), scope=key_scope(request))
    return await _respond(job, request, serving)


def _arrival(request: Request) -> float:
    arrival: float = request.scope.get("state", {}).get("arrival", time.monotonic())
    return arrival


async def _respond(job: Job, request: Request, serving: Serving) -> Response:
    serving.start(job)
    if job.stream:
        settings = serving.settings
        return EventSourceResponse(
            serving.stream(job),
            sep="\n",
            ping=settings.sse_ping_s,
            # Graceful shutdown: let in-flight streams finish instead of cutting them.
            shutdown_grace_period=settings.drain_timeout_s,
            # Runs even when the client left before the first frame was produced.
            background=BackgroundTask(serving.release, job),
        )
    body = await _unless_disconnected(request, serving.complete(job))
    if body is None:
        return Response(status_code=499)  # nobody is listening; the job was aborted
    return JSONResponse(body)


async def _unless_disconnected(request: Request, work: Any) -> dict[str, Any] | None:
    """Race the job against `http.disconnect` (vLLM's `with_cancellation`); cancel on loss."""
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
    result: dict[str, Any] = task.result()
    return result


async def _wait_disconnect(request: Request) -> None:
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return
