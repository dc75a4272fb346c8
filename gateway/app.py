"""`create_app(settings, engine=None)`: the FastAPI application and its lifespan.

This module is where the gateway is wired, and the only one that does it: `build_components`
builds every per-app object once (`Components`), `create_app` puts each into `app.state` under
its field name (read back only through the typed dependencies of `gateway.http.deps`), adds the
middlewares and routers, and the lifespan starts and stops the components in order.

Start-up order: the engine worker thread starts loading and warming the engine in the
background (so `/health` answers at once and `/ready` says 503 until it is done), while the
registry database is migrated to head; then the admin page's aggregator subscribes to the event
bus (with an admin key only). Shutdown closes the page streams, stops pool changes, drains
in-flight requests (up to `drain_timeout_s`) before the worker stops, then closes the registry.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from functools import partial

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware

from core.api import engine_from_dirs, engine_from_pool_file
from gateway.config import Settings
from gateway.errors import install_error_handlers
from gateway.http.keys import KeySet
from gateway.http.middleware import ArrivalClock, BodySizeLimit
from gateway.http.ratelimit import RateLimit
from gateway.http.routes import admin, admin_live, health, openai
from gateway.live.aggregator import STALE_S, LiveAggregator, Load
from gateway.live.events import EventBus
from gateway.metrics import GatewayMetrics
from gateway.openai.response_store import ResponseStore
from gateway.openai.serving_chat import OpenAIServingChat
from gateway.openai.serving_completion import OpenAIServingCompletion
from gateway.openai.serving_models import OpenAIServingModels
from gateway.openai.serving_responses import OpenAIServingResponses
from gateway.pool.database import RegistryLink
from gateway.pool.registry import RegistryService
from gateway.runner import Engine, EngineRunner

log = logging.getLogger(__name__)
# A registry that failed to open at start is retried after 1, 2, 4 ... 30 s.
REGISTRY_RETRY_S = 1.0
REGISTRY_RETRY_MAX_S = 30.0


def load_engine(settings: Settings) -> Engine:
    """Build the engine the settings describe (runs on the worker thread)."""
    if settings.torch_threads is not None:
        import torch

        torch.set_num_threads(settings.torch_threads)
    config = settings.engine_config()
    if settings.target is not None:
        from gateway.pool.target_source import target_dir_for_engine

        target_dir = target_dir_for_engine(settings)
        assert target_dir is not None
        return engine_from_dirs(
            target_dir, settings.drafter_dirs(), config,
            model_name=settings.model_name or str(settings.target),
        )
    if settings.pool is None:
        raise ValueError("no model to serve: set --pool or --target")
    return engine_from_pool_file(settings.pool, config, model_name=settings.model_name)


async def _start_registry(app_: FastAPI, service: RegistryService) -> None:
    await service.start()  # served pool -> registry, fetcher, pool sync, logs
    app_.state.request_log = service.request_log


async def _reopen(app_: FastAPI, registry: RegistryLink, service: RegistryService) -> None:
    """Retry a registry that could not be opened at start (database still starting, a lock, a
    network cut) with backoff, and start the registry service once it opens; until then the
    gateway serves its static pool and the admin pool API answers 503."""
    delay = REGISTRY_RETRY_S
    while registry.engine is None:
        await asyncio.sleep(delay)
        delay = min(2 * delay, REGISTRY_RETRY_MAX_S)
        await asyncio.to_thread(registry.open, quiet=True)
    log.info("drafter registry reachable again: starting pool management")
    try:
        await _start_registry(app_, service)
    except Exception:  # a task's exception would otherwise surface only at shutdown, if at all
        log.exception("could not start pool management on the reopened registry")


@dataclass(frozen=True)
class Components:
    """The per-app objects, built once; `app.state.<field>` holds each (see `gateway.http.deps`)."""

    settings: Settings
    metrics: GatewayMetrics
    events: EventBus
    runner: EngineRunner
    serving_models: OpenAIServingModels
    serving_chat: OpenAIServingChat
    serving_completion: OpenAIServingCompletion
    serving_responses: OpenAIServingResponses
    registry: RegistryLink
    registry_service: RegistryService
    api_keys: KeySet
    admin_keys: KeySet
    admin_live: LiveAggregator | None  # the admin page's live state; None without an admin key


def build_components(settings: Settings, engine: Engine | None = None) -> Components:
    metrics = GatewayMetrics()
    events = EventBus()
    runner = _runner(settings, engine, metrics, events)
    models = OpenAIServingModels(runner, settings)
    registry = RegistryLink(settings.database_url)
    admin_keys = KeySet([settings.admin_key] if settings.admin_key else [])
    return Components(
        settings=settings,
        metrics=metrics,
        events=events,
        runner=runner,
        serving_models=models,
        serving_chat=OpenAIServingChat(models, metrics),
        serving_completion=OpenAIServingCompletion(models, metrics),
        serving_responses=OpenAIServingResponses(
            models, metrics, ResponseStore(registry, settings.responses_retention_days)),
        registry=registry,
        registry_service=RegistryService(settings, runner, events, registry),
        api_keys=KeySet(settings.api_keys),
        admin_keys=admin_keys,
        admin_live=_aggregator(settings, runner) if admin_keys.enabled else None,
    )


def _runner(
    settings: Settings, engine: Engine | None, metrics: GatewayMetrics, events: EventBus
) -> EngineRunner:
    loader = (lambda: engine) if engine is not None else partial(load_engine, settings)
    config = settings.engine_config()
    return EngineRunner(
        loader,
        max_running=config.max_running,
        max_queue=settings.max_queue,
        request_timeout_s=settings.request_timeout_s,
        metrics=metrics,
        events=events,
        config_repr=repr(config),
        warmup=settings.warmup,
    )


def _aggregator(settings: Settings, runner: EngineRunner) -> LiveAggregator:
    def load() -> Load:
        return Load(runner.in_flight, runner.max_running, runner.max_queue)

    # A trace idle past the request deadline (plus slack) lost its `request_finished`: evict it.
    return LiveAggregator(load, stale_after_s=settings.request_timeout_s + STALE_S)


def create_app(settings: Settings | None = None, engine: Engine | None = None) -> FastAPI:
    parts = build_components(settings or Settings(), engine)
    app = FastAPI(title="HedgeSpec Gateway", version="0.1.0", lifespan=_lifespan(parts))
    for field in dataclasses.fields(parts):
        setattr(app.state, field.name, getattr(parts, field.name))
    app.state.request_log = None  # set once the registry has started (`_start_registry`)
    install_error_handlers(app)
    _add_middleware(app, parts)
    app.include_router(health.router)
    app.include_router(openai.router)
    app.include_router(admin_live.router)  # /admin page + live stream, overview, history
    app.include_router(admin.router)  # /admin/api/drafters, /events, /pool (the registry)
    return app


def _add_middleware(app: FastAPI, parts: Components) -> None:
    """Added innermost first: the arrival clock runs before anything else reads the request."""
    settings = parts.settings
    if settings.rate_limit_rps is not None:  # inside CORS, so a 429 still carries its headers
        app.add_middleware(RateLimit, rps=settings.rate_limit_rps,
                           burst=settings.rate_limit_burst, keys=parts.api_keys,
                           metrics=parts.metrics)
    if settings.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.cors_origins,
            allow_methods=["GET", "POST", "DELETE", "OPTIONS"],
            allow_headers=["Authorization", "Content-Type"],
        )
    app.add_middleware(BodySizeLimit, max_body_bytes=settings.max_body_bytes)
    app.add_middleware(ArrivalClock)


def _lifespan(parts: Components) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        reopening = await _start(app, parts)
        yield
        await _stop(parts, reopening)

    return lifespan


async def _start(app: FastAPI, parts: Components) -> asyncio.Task[None] | None:
    """Start everything; returns the task retrying a registry that did not open, if any."""
    parts.events.bind(asyncio.get_running_loop())
    parts.runner.start()
    await asyncio.to_thread(parts.registry.open)
    if parts.admin_live is not None:
        parts.admin_live.start(parts.events)
    if parts.registry.engine is not None:
        await _start_registry(app, parts.registry_service)
        return None
    # Serve the static pool; the registry may come up later.
    log.warning("drafter registry unavailable (%s): serving the static pool", parts.registry.error)
    return asyncio.create_task(_reopen(app, parts.registry, parts.registry_service),
                               name="registry-reopen")


async def _stop(parts: Components, reopening: asyncio.Task[None] | None) -> None:
    if parts.admin_live is not None:
        await parts.admin_live.stop()  # ends the page streams first: they never drain
    if reopening is not None:
        reopening.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reopening
    await parts.registry_service.stop_background()  # no pool changes while draining
    log.info("draining %d in-flight requests", parts.runner.in_flight)
    await parts.runner.stop(parts.settings.drain_timeout_s)
    await parts.registry_service.close()  # after the drain, so its requests are logged
    parts.registry.close()
