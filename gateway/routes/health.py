"""Liveness, readiness and Prometheus metrics (unauthenticated, like vLLM's)."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from gateway.deps import MetricsDep, RunnerDep
from gateway.errors import APIError, not_ready, to_response
from gateway.metrics import CONTENT_TYPE

router = APIRouter(tags=["health"])


@router.get("/health")
async def health() -> dict[str, str]:
    """Liveness: the process answers."""
    return {"status": "ok"}


@router.get("/ready", response_model=None)
async def ready(request: Request, runner: RunnerDep) -> JSONResponse:
    """Readiness: the engine is loaded and warmed, and the registry database answers."""
    registry = request.app.state.registry
    db_ok, db_detail = await asyncio.to_thread(registry.check)
    try:
        runner.check_ready()
    except APIError as err:
        return to_response(err)
    if not db_ok:
        return to_response(not_ready(f"the registry is unreachable: {db_detail}"))
    assert runner.info is not None
    body: dict[str, Any] = {
        "status": "ready",
        "model": runner.info.model_name,
        "drafters": list(runner.info.drafter_ids),
        "registry": db_detail,
        "in_flight": runner.in_flight,
    }
    return JSONResponse(body)


@router.get("/metrics")
async def metrics(metrics: MetricsDep) -> Response:
    """Prometheus text exposition of this app's registry."""
    return Response(metrics.render(), media_type=CONTENT_TYPE)
