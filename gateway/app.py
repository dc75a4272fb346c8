"""`create_app(settings, engine=None)`: the FastAPI application and its lifespan.

Start-up order: the engine worker thread starts loading and warming the engine in the
background (so `/health` answers at once and `/ready` says 503 until it is done), while the
registry database is migrated to head. Shutdown drains in-flight requests (up to
`drain_timeout_s`) before the worker stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware

from gateway.config import Settings
from gateway.http.auth import KeySet
from gateway.http.errors import install_error_handlers
from gateway.http.metrics import GatewayMetrics
from gateway.http.middleware import ArrivalClock, BodySizeLimit
from gateway.http.ratelimit import RateLimit
from gateway.http.routes import admin, health, openai
from gateway.live import routes as admin_live
from gateway.live.events import EventBus
from gateway.openai.serving import Serving
from gateway.pool.database import RegistryLink
from gateway.pool.registry import RegistryService
from gateway.runner import Engine, EngineRunner

log = logging.getLogger(__name__)
# A registry that failed to open at start is retried after 1, 2, 4 ... 30 s.
REGISTRY_RETRY_S = 1.0
REGISTRY_RETRY_MAX_S = 30.0


def load_engine(settings: Settings) -> Engine:
    """Build the engine the settings describe (runs on the worker thread)."""
    from core.engine import SpecEngine

    if settings.torch_threads is not None:
        import torch

        torch.set_num_threads(settings.torch_threads)
    config = settings.engine_config()
    if settings.target is not None:
        from gateway.pool.target_source import target_dir_for_engine

        target_dir = target_dir_for_engine(settings)
        assert target_dir is not None
        return SpecEngine.from_dirs(
            target_dir, settings.drafter_dirs(), config,
            model_name=settings.model_name or str(settings.target),
        )
    if settings.pool is None:
        raise ValueError("no model to serve: set --pool or --target")
    from demo.pool_target import open_pool_engine

    engine: Engine = open_pool_engine(settings.pool, config, model_name=settings.model_name)
    return engine


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


def create_app(settings: Settings | None = None, engine: Engine | None = None) -> FastAPI:
    settings = settings or Settings()
    metrics = GatewayMetrics()
    events = EventBus()
    loader = (lambda: engine) if engine is not None else partial(load_engine, settings)
    runner = EngineRunner(
        loader,
        max_running=settings.max_running,
        max_queue=settings.max_queue,
        request_timeout_s=settings.request_timeout_s,
        metrics=metrics,
        events=events,
        config_repr=repr(settings.engine_config()),
        warmup=settings.warmup,
    )
    registry = RegistryLink(settings.database_url)
    registry_service = RegistryService(settings, runner, events, registry)

    @asynccontextmanager
    async def lifespan(app_: FastAPI) -> AsyncIterator[None]:
        events.bind(asyncio.get_running_loop())
        runner.start()
        await asyncio.to_thread(registry.open)
        reopening = None
        if registry.engine is None:  # serve the static pool; the registry may come up later
            log.warning("drafter registry unavailable (%s): serving the static pool", registry.error)
            reopening = asyncio.create_task(_reopen(app_, registry, registry_service), name="registry-reopen")
        else:
            await _start_registry(app_, registry_service)
        yield
        if reopening is not None:
            reopening.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reopening
        await registry_service.stop_background()  # no pool changes while draining
        log.info("draining %d in-flight requests", runner.in_flight)
        await runner.stop(settings.drain_timeout_s)
        await registry_service.close()  # after the drain, so its requests are logged
        registry.close()

    app = FastAPI(title="HedgeSpec Gateway", version="0.1.0", lifespan=lifespan)
    app.state.settings = settings
    app.state.runner = runner
    app.state.serving = Serving(runner, settings, metrics)
    app.state.metrics = metrics
    app.state.events = events
    app.state.registry = registry
    app.state.registry_service = registry_service
    app.state.api_keys = KeySet(settings.api_keys)
    app.state.admin_keys = KeySet([settings.admin_key] if settings.admin_key else [])
    install_error_handlers(app)
    if settings.rate_limit_rps is not None:  # inside CORS, so a 429 still carries its headers
        app.add_middleware(RateLimit, rps=settings.rate_limit_rps,
                           burst=settings.rate_limit_burst, keys=app.state.api_keys,
                           metrics=metrics)
    if settings.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.cors_origins,
            allow_methods=["GET", "POST", "OPTIONS"],
            allow_headers=["Authorization", "Content-Type"],
        )
    app.add_middleware(BodySizeLimit, max_body_bytes=settings.max_body_bytes)
    app.add_middleware(ArrivalClock)
    app.include_router(health.router)
    app.include_router(openai.router)
    app.include_router(admin_live.router)  # /admin page + live stream (starts its aggregator)
    app.include_router(admin.router)  # /admin/api/drafters, /events, /pool (the registry)
    return app
