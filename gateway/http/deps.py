"""Accessors for per-app objects (vLLM's `app.state` accessors with FastAPI `Annotated` aliases)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from gateway.http.metrics import GatewayMetrics
from gateway.live.events import EventBus
from gateway.openai.serving import Serving
from gateway.runner import EngineRunner


def get_serving(request: Request) -> Serving:
    serving: Serving = request.app.state.serving
    return serving


def get_runner(request: Request) -> EngineRunner:
    runner: EngineRunner = request.app.state.runner
    return runner


def get_metrics(request: Request) -> GatewayMetrics:
    metrics: GatewayMetrics = request.app.state.metrics
    return metrics


def get_events(request: Request) -> EventBus:
    events: EventBus = request.app.state.events
    return events


ServingDep = Annotated[Serving, Depends(get_serving)]
RunnerDep = Annotated[EngineRunner, Depends(get_runner)]
MetricsDep = Annotated[GatewayMetrics, Depends(get_metrics)]
EventsDep = Annotated[EventBus, Depends(get_events)]
