"""Liveness, readiness and Prometheus metrics (unauthenticated, like vLLM's)."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response

from gateway.errors import APIError, to_response
from gateway.http.deps import MetricsDep, RegistryLinkDep, RunnerDep
from gateway.metrics import CONTENT_TYPE

router = APIRouter(tags=["health"])


@router.get("/health")
async def health() -> dict[str, str]:
    """Liveness: the process answers."""
    return {"status": "ok"}


@router.get("/ready", response_model=None)
async def ready(runner: RunnerDep, registry: RegistryLinkDep) -> JSONResponse:
    """Readiness: the engine is loaded and warmed, so this replica can serve completions.

    The registry database is reported, not required: generation never touches it, and every
    replica shares it, so failing readiness on a database outage would take the whole fleet out
    of its load balancer at once while each replica could still serve. Pool changes wait for
    the database to return (the admin API answers 503 registry_unavailable meanwhile).
    """
    try:
        runner.check_ready()
    except APIError as err:
        return to_response(err)
    db_ok, db_detail = await asyncio.to_thread(registry.check)
    assert runner.info is not None
    body: dict[str, Any] = {
        "status": "ready",
        "model": runner.info.model_name,
        "drafters": list(runner.info.drafter_ids),
        "registry": db_detail if db_ok else f"unreachable: {db_detail}",
        "in_flight": runner.in_flight,
    }
    return JSONResponse(body)


@router.get("/metrics")
async def metrics(metrics: MetricsDep) -> Response:
    """Prometheus text exposition of this app's registry."""
    return Response(metrics.render(), media_type=CONTENT_TYPE)
