"""Typed accessors for the per-app objects that `gateway.app.create_app` wires into `app.state`
(vLLM's `app.state` accessors, as FastAPI `Annotated` aliases).

`gateway.app` is the only writer of `app.state` and this module its only reader: routes and the
auth dependencies name what they need in their signatures (`runner: RunnerDep`), so what a
route touches is visible there, and a test can swap any of it (`app.dependency_overrides`).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from drafter_registry.request_log import RequestLogWriter
from gateway.config import Settings
from gateway.errors import admin_disabled, registry_unavailable
from gateway.http.keys import KeySet
from gateway.live.aggregator import LiveAggregator
from gateway.metrics import GatewayMetrics
from gateway.openai.serving_chat import OpenAIServingChat
from gateway.openai.serving_completion import OpenAIServingCompletion
from gateway.openai.serving_models import OpenAIServingModels
from gateway.openai.serving_responses import OpenAIServingResponses
from gateway.pool.database import RegistryLink
from gateway.pool.registry import RegistryService
from gateway.runner import EngineRunner


def get_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


SettingsDep = Annotated[Settings, Depends(get_settings)]


def get_serving_models(request: Request) -> OpenAIServingModels:
    serving: OpenAIServingModels = request.app.state.serving_models
    return serving


ModelsServingDep = Annotated[OpenAIServingModels, Depends(get_serving_models)]


def get_serving_chat(request: Request) -> OpenAIServingChat:
    serving: OpenAIServingChat = request.app.state.serving_chat
    return serving


ChatServingDep = Annotated[OpenAIServingChat, Depends(get_serving_chat)]


def get_serving_completion(request: Request) -> OpenAIServingCompletion:
    serving: OpenAIServingCompletion = request.app.state.serving_completion
    return serving


CompletionServingDep = Annotated[OpenAIServingCompletion, Depends(get_serving_completion)]


def get_serving_responses(request: Request) -> OpenAIServingResponses:
    serving: OpenAIServingResponses = request.app.state.serving_responses
    return serving


ResponsesServingDep = Annotated[OpenAIServingResponses, Depends(get_serving_responses)]


def get_runner(request: Request) -> EngineRunner:
    runner: EngineRunner = request.app.state.runner
    return runner


RunnerDep = Annotated[EngineRunner, Depends(get_runner)]


def get_metrics(request: Request) -> GatewayMetrics:
    metrics: GatewayMetrics = request.app.state.metrics
    return metrics


MetricsDep = Annotated[GatewayMetrics, Depends(get_metrics)]


def get_api_keys(request: Request) -> KeySet:
    keys: KeySet = request.app.state.api_keys
    return keys


ApiKeysDep = Annotated[KeySet, Depends(get_api_keys)]


def get_admin_keys(request: Request) -> KeySet:
    keys: KeySet = request.app.state.admin_keys
    return keys


AdminKeysDep = Annotated[KeySet, Depends(get_admin_keys)]


def get_registry(request: Request) -> RegistryLink:
    registry: RegistryLink = request.app.state.registry
    return registry


RegistryLinkDep = Annotated[RegistryLink, Depends(get_registry)]


def get_registry_service(request: Request, registry: RegistryLinkDep) -> RegistryService:
    """The pool manager; 503 `registry_unavailable` until the registry database has opened."""
    service: RegistryService = request.app.state.registry_service
    if not service.available:
        raise registry_unavailable(registry.error)
    return service


RegistryServiceDep = Annotated[RegistryService, Depends(get_registry_service)]


def get_request_log(request: Request) -> RequestLogWriter | None:
    """The `request_logs` writer once the registry has started; None without one."""
    log: RequestLogWriter | None = getattr(request.app.state, "request_log", None)
    return log


RequestLogDep = Annotated[RequestLogWriter | None, Depends(get_request_log)]


def get_aggregator(request: Request) -> LiveAggregator:
    """The admin page's live state; it exists only with an admin key configured."""
    aggregator: LiveAggregator | None = request.app.state.admin_live
    if aggregator is None:
        raise admin_disabled()
    return aggregator


AggregatorDep = Annotated[LiveAggregator, Depends(get_aggregator)]
