"""The drafter registry wired into a running gateway: fetching, pool sync and request logs.

Start-up (after `RegistryLink.open` migrated the database):

1. The served pool (`--pool` file, or `--target` with `--drafter`) is imported into the registry
   as `source: local` drafters with the pool's ids, straight to `ready` (the engine loads and
   checks them itself at start), and its model-free entries (`{"id", "kind", "params"}`) as
   model-free rows with their full parameters, so the admin page lists them and operators can
   disable or remove them like any other drafter. Idempotent: an existing row is left as it is, so a
   drafter an operator disabled stays disabled across restarts; a deleted one comes back on the
   next start because the pool file still lists it (disable it, or edit the pool file). A served
   drafter whose id the registry refuses stays served but "unmanaged" (pool sync never touches
   it).
2. `seed_pool`, when set, is imported the same idempotent way (new rows start `pending`). Only
   drafters come from a seed pool: the target is always the one loaded from `--pool`/`--target`,
   so a seed pool whose `target` is a Hub id (e.g. pools/llama31_8b_hedgespec.json) needs that
   target downloaded beforehand (`hf download meta-llama/Llama-3.1-8B-Instruct --local-dir ...`)
   and served with `--target`. A seed pool's `discover` entries list their Hub repository
   through the fetcher's settings (cache, token, `HF_ENDPOINT`); if that fails (hub down,
   offline), the rest of the file is imported, the error logged, and the import retried in the
   background with backoff (`SEED_RETRY_S`) until it succeeds, so the discovered drafters
   arrive without a restart.
3. A `DrafterFetcher` downloads and validates drafters in the background. Its validator is
   `core.model.drafter_check.inspect_drafter` against the served target (the same check as
   `hedgespec drafter inspect`), followed by an actual load into the engine (`PoolSync.preload`), so
   a drafter reaches `ready` only once this replica serves it. Unfinished drafters are resumed.
4. `PoolSync` keeps the engine equal to the registry's ready set (see `gateway.pool.sync`); when
   the pool version moves it also picks up `pending` drafters registered elsewhere (the CLI,
   another replica), so `hedgespec drafter add` works against a running server.
5. With an admin key configured, `RequestLogWriter` receives every `request_finished` event of
   the event bus and stores the request's statistics in `request_logs` (the record:
   `gateway.pool.request_log`; prompt text only with `log_prompts`, and only when the event
   carries it). Without an admin key nothing is collected, as for the live page: nobody could
   read it through the admin API.

A registry that cannot be opened leaves the gateway serving its static pool; the admin pool API
then answers 503, and the app retries opening it with backoff and starts all of the above once it
opens (`gateway.app`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import logging
import os
import socket
import threading
import time
from collections.abc import Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from core.api import PoolFile, PoolFileError, load_pool_file
from drafter_registry import crud
from drafter_registry.db import make_session_factory
from drafter_registry.errors import DrafterConflict, RegistryError, StatusConflict
from drafter_registry.fetcher import DrafterFetcher, FetchSettings, ensure_local_copy
from drafter_registry.identifiers import validate_domain, validate_drafter_id
from drafter_registry.models import Drafter, DrafterSource, DrafterStatus
from drafter_registry.request_log import RequestLogWriter
from drafter_registry.seed import import_seed_pool, load_seed_pool
from gateway.config import Settings
from gateway.live.event_types import RequestFinished
from gateway.live.events import EventBus, Subscription
from gateway.pool.database import RegistryLink
from gateway.pool.model_free import EAGLE3, full_params, model_free_key
from gateway.pool.request_log import request_log_record
from gateway.pool.sync import PoolSync, drafter_key, local_key
from gateway.runner import EngineRunner

log = logging.getLogger(__name__)

SERVED_ACTOR = "served-pool"
SEED_ACTOR = "seed-pool"
FETCH_ACTOR = "fetcher"
ENGINE_INFO_TIMEOUT_S = 60.0
ENGINE_LOAD_WAIT_S = 3600.0  # a validation waits this long at most for the engine to load
SEED_RETRY_S = (30.0, 60.0, 120.0, 300.0, 600.0)  # a seed import that could not reach the hub


@dataclass(frozen=True)
class ServedDrafter:
    """A drafter the engine loads at start, from the pool file or `--drafter`: EAGLE-3 weights
    at `path`, or a model-free `kind` with its `params` (no path)."""

    id: str
    path: Path | None
    name: str
    domain: str | None = None
    kind: str = EAGLE3
    params: Mapping[str, Any] | None = None

    @property
    def model_free(self) -> bool:
        return self.kind != EAGLE3

    def key(self) -> str | None:
        """The pool sync's key of what the engine loaded (`gateway.pool.sync.drafter_key`);
        None for a model-free entry the engine's kinds refuse (then the engine did not load)."""
        if not self.model_free:
            assert self.path is not None
            return local_key(self.path)
        try:
            return model_free_key(self.kind, full_params(self.kind, self.params))
        except ValueError:
            return None


def served_target_dir(settings: Settings) -> Path | None:
    """The target directory the engine loads (what downloaded drafters are checked against)."""
    if settings.target is not None:
        from drafter_registry.errors import HubError
        from gateway.pool.target_source import target_dir_for_validation

        try:
            return target_dir_for_validation(settings)
        except HubError as exc:  # the hub is down: serve on, refuse to validate drafters
            log.error("cannot fetch the target's config: %s", exc)
            return None
    pool = _served_pool(settings)
    if pool is None:
        return None
    # A provisioned target was converted before the engine started (gateway.cli.serve.serve).
    return pool.target.directory(provision=False).resolve()


def served_drafters(settings: Settings) -> list[ServedDrafter]:
    """The drafters the engine loads at start, with absolute paths (as `SpecEngine` joins them)."""
    if settings.target is not None:
        return [ServedDrafter(i, p.expanduser().resolve(), i) for i, p in settings.drafter_dirs()]
    pool = _served_pool(settings)
    if pool is None:
        return []
    return [ServedDrafter(d.id, d.path.resolve() if d.path is not None else None,
                          d.name or d.id, d.domain or None, d.kind,
                          dict(d.params) if d.params is not None else None)
            for d in pool.drafters]


def _served_pool(settings: Settings) -> PoolFile | None:
    if settings.pool is None:
        return None
    try:
        return load_pool_file(settings.pool)
    except PoolFileError:
        return None  # the engine reports the bad pool file; nothing to import


def import_served_pool(
    session_factory: sessionmaker[Session], served: list[ServedDrafter], *, target_model: str | None
) -> list[str]:
    """Register the served drafters as ready local drafters; returns the ids the registry
    refused (left unmanaged). Existing rows are never changed."""
    unmanaged = []
    for drafter in served:
        try:
            validate_drafter_id(drafter.id)
            key = drafter.key()
            if key is None:
                raise RegistryError(f"the engine refuses kind {drafter.kind!r} with params "
                                    f"{dict(drafter.params or {})}")
        except RegistryError as exc:
            log.warning("served drafter %r stays unmanaged (not in the registry): %s", drafter.id,
                        exc)
            unmanaged.append(drafter.id)
            continue
        with session_factory() as session:
            existing = crud.get_drafter(session, drafter_id=drafter.id)
            if existing is not None:
                if existing.source == DrafterSource.HF.value or drafter_key(existing) != key:
                    log.warning("registry drafter %r differs from the served pool's (%s): the "
                                "registry wins", drafter.id, drafter.path or drafter.kind)
                continue
            try:
                _register_ready(session, drafter, target_model)
            except (DrafterConflict, StatusConflict) as exc:
                # Another replica registered it at the same moment, or a fetcher moved it on.
                log.info("served drafter %r: %s", drafter.id, exc)
    return unmanaged


def _register_ready(session: Session, drafter: ServedDrafter, target_model: str | None) -> None:
    domain = drafter.domain
    if domain is not None:
        try:
            domain = validate_domain(domain)
        except RegistryError:
            domain = None  # a free-text domain in a pool file is not worth refusing the drafter
    name = drafter.name
    if crud.get_drafter_by_name(session, name=name) is not None:
        name = f"{name} ({drafter.id})"
    if drafter.model_free:  # registered `ready`: nothing to check
        crud.create_drafter(session, drafter_id=drafter.id, name=name[:128], kind=drafter.kind,
                            params=full_params(drafter.kind, drafter.params), domain=domain,
                            target_model=target_model, actor=SERVED_ACTOR)
        return
    assert drafter.path is not None
    crud.create_drafter(session, drafter_id=drafter.id, name=name[:128], source="local",
                        path=str(drafter.path), domain=domain, target_model=target_model,
                        actor=SERVED_ACTOR)
    # The engine loaded and checked these weights at start: record them as validated.
    crud.finish_download(session, drafter_id=drafter.id, local_path=str(drafter.path),
                         commit_sha=None, actor=SERVED_ACTOR)
    crud.mark_ready(session, drafter_id=drafter.id, actor=SERVED_ACTOR,
                    inspection={"compatible": True, "reason": None, "origin": "served pool"})


class RegistryService:
    """Owns the fetcher, the pool sync thread and the request-log writer of one gateway."""

    def __init__(
        self, settings: Settings, runner: EngineRunner, events: EventBus, link: RegistryLink
    ) -> None:
        self.settings, self.runner, self.events, self.link = settings, runner, events, link
        self.replica = f"{socket.gethostname()}:{os.getpid()}"
        self.session_factory: sessionmaker[Session] | None = None
        self.fetcher: DrafterFetcher | None = None
        self.pool_sync: PoolSync | None = None
        self.request_log: RequestLogWriter | None = None
        self.target_dir = served_target_dir(settings)
        self.fetch_settings = FetchSettings(
            cache_dir=Path(settings.hf_cache_dir).expanduser(),
            token=settings.hf_token.get_secret_value() if settings.hf_token else None,
            target_dir=self.target_dir,
        )
        # Drafters this replica's fetcher works on, with the fetch's future.
        self._inflight: dict[str, Future[str | None]] = {}
        self._inflight_lock = threading.Lock()
        self._aux_layers: tuple[int, int, int] | None = None
        self._log_task: asyncio.Task[None] | None = None
        self._stopping = threading.Event()

    @property
    def available(self) -> bool:
        return self.session_factory is not None

    # ---- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        """Call after `RegistryLink.open`; a registry that did not open disables all of this."""
        if self.link.engine is None:
            return
        self.session_factory = make_session_factory(self.link.engine)
        if self.settings.admin_key is not None:
            # Like the live page (gateway.http.routes.admin_live): without an admin key nobody may
            # read request data, so none is collected, and without an event-bus subscriber the
            # engine worker does not even build per-round events.
            self.request_log = RequestLogWriter(
                self.session_factory,
                retention_days=self.settings.request_log_retention_days or None,
                store_prompts=self.settings.log_prompts,
            )
            self._log_task = asyncio.create_task(
                self._log_requests(self.events.subscribe()), name="request-log-feed"
            )
        await asyncio.to_thread(self._start_pool)

    def _start_pool(self) -> None:
        assert self.session_factory is not None
        served = served_drafters(self.settings)
        model = self.settings.model_name or (self.target_dir.name if self.target_dir else None)
        unmanaged = import_served_pool(self.session_factory, served, target_model=model)
        seed_pool = self.settings.seed_pool
        if seed_pool is not None and not self._import_seed(seed_pool):
            threading.Thread(target=self._retry_seed, args=(seed_pool,), name="seed-retry",
                             daemon=True).start()
        self.fetcher = DrafterFetcher(self.session_factory, self.fetch_settings,
                                      validator=self._validate, actor=FETCH_ACTOR)
        self.pool_sync = PoolSync(
            self.runner,
            self.session_factory,
            resolve=lambda row: ensure_local_copy(row, settings=self.fetch_settings),
            interval_s=self.settings.pool_sync_interval_s,
            initial={d.id: key for d in served if (key := d.key()) is not None},
            unmanaged=unmanaged,
            on_version_change=self.submit_pending,
            replica=self.replica,
        )
        self.pool_sync.start()
        self.resume_unfinished()

    async def stop_background(self) -> None:
        """Before the engine drains: no pool changes or downloads during shutdown (interrupted
        downloads stay `downloading` and resume on the next start)."""
        self._stopping.set()
        if self.pool_sync is not None:
            await asyncio.to_thread(self.pool_sync.stop)
        if self.fetcher is not None:
            await asyncio.to_thread(self.fetcher.shutdown, wait=True)

    async def close(self) -> None:
        """After the engine drained: log what finished during the drain, then stop logging."""
        await asyncio.sleep(0.05)  # events the worker queued onto the loop are delivered first
        if self._log_task is not None:
            self._log_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._log_task
        if self.request_log is not None:
            await asyncio.to_thread(self.request_log.close)

    # ---- fetching ------------------------------------------------------------------------------

    def submit(self, drafter_id: str) -> None:
        """Download and validate a drafter in the background (no-op if already running)."""
        if self.fetcher is None:
            return
        with self._inflight_lock:
            future = self.fetcher.submit(drafter_id)
            if self._inflight.get(drafter_id) is future:
                return  # already running for us: its callback is in place
            self._inflight[drafter_id] = future
        future.add_done_callback(lambda f: self._fetch_done(drafter_id, f))

    def submit_pending(self) -> None:
        """Pick up drafters registered elsewhere (CLI, another replica) and not started yet."""
        assert self.session_factory is not None
        with self.session_factory() as session:
            ids = [d.id for d in crud.list_drafters(session, statuses=[DrafterStatus.PENDING])]
        for drafter_id in ids:
            self.submit(drafter_id)

    def resume_unfinished(self) -> list[str]:
        """At start: continue every drafter a crash or restart left unfinished."""
        assert self.session_factory is not None
        with self.session_factory() as session:
            rows = crud.list_unfinished(session)
            for row in rows:
                if row.source == DrafterSource.HF.value and row.status == DrafterStatus.VALIDATING:
                    # The fetcher resumes Hub drafters through `downloading` only (the cached
                    # files make that step instant), so step a half-validated one back.
                    with contextlib.suppress(StatusConflict):
                        crud.set_status(session, drafter_id=row.id, status="downloading",
                                        actor=FETCH_ACTOR, expected={"validating"})
        ids = [row.id for row in rows]
        for drafter_id in ids:
            self.submit(drafter_id)
        return ids

    def _fetch_done(self, drafter_id: str, future: Future[str | None]) -> None:
        with self._inflight_lock:
            if self._inflight.get(drafter_id) is future:
                del self._inflight[drafter_id]
        if future.cancelled() or self._stopping.is_set():
            return
        if self.pool_sync is not None:
            self.pool_sync.release(drafter_id)
        # Re-enabled or retried while this fetch was still winding down (the fetcher ignored
        # that submit as a duplicate): a fetch never leaves a row `pending`, so start anew.
        assert self.session_factory is not None
        with self.session_factory() as session:
            row = crud.get_drafter(session, drafter_id=drafter_id)
            again = row is not None and row.status == DrafterStatus.PENDING.value
        if again:
            self.submit(drafter_id)

    def _validate(self, path: Path) -> dict[str, Any]:
        """The fetcher's full check: `inspect_drafter` against the served target, then a real
        load into this replica's engine, so `ready` means servable here."""
        from core.api import inspect_drafter

        if self.target_dir is None:
            return {"compatible": False,
                    "reason": "the served target directory is unknown: cannot validate drafters"}
        # Drafters resumed at start validate while the engine may still be loading: wait for
        # it, so that `ready` still means "served here" (this thread is a background one).
        self._wait_for_engine()
        report = inspect_drafter(path, self.target_dir, None, self._target_aux_layers())
        if not report.compatible or self.pool_sync is None:
            return report.to_json()
        entries = self._validating_here(path)
        try:
            self.pool_sync.preload(entries, path)
        except Exception as exc:
            reason = f"the engine could not load it: {type(exc).__name__}: {exc}"
            return dataclasses.replace(report, compatible=False, reason=reason).to_json()
        return report.to_json()

    def _wait_for_engine(self) -> None:
        """Until the engine is loaded; returns early if it failed to load or we shut down (then
        the pool sync adds the drafter later, if ever)."""
        deadline = time.monotonic() + ENGINE_LOAD_WAIT_S
        while not self.runner.ready and self.runner.load_error is None:
            if self._stopping.wait(0.2) or time.monotonic() > deadline:
                return

    def _validating_here(self, path: Path) -> dict[str, str]:
        """id -> key of the rows this replica is validating from `path` (usually one)."""
        assert self.session_factory is not None
        with self._inflight_lock:
            mine = set(self._inflight)
        with self.session_factory() as session:
            rows = session.scalars(
                select(Drafter).where(Drafter.status == DrafterStatus.VALIDATING.value,
                                      Drafter.local_path == str(path))
            )
            return {r.id: drafter_key(r) for r in rows if r.id in mine}

    def _target_aux_layers(self) -> tuple[int, int, int] | None:
        """The served target's feature layers, so drafters are checked against what it uses."""
        if self._aux_layers is None and self.runner.ready:
            with contextlib.suppress(Exception):
                aux = self.runner.call(lambda e: e.facts().aux_layers).result(
                    timeout=ENGINE_INFO_TIMEOUT_S)
                self._aux_layers = tuple(aux) if aux else None  # type: ignore[assignment]
        return self._aux_layers

    # ---- seed pools and request logs -----------------------------------------------------------

    def _import_seed(self, path: Path) -> bool:
        """Import the seed pool; False when a `discover` entry could not list the hub (the
        caller retries: the import is idempotent)."""
        assert self.session_factory is not None
        try:
            pool = load_seed_pool(path)
            with self.session_factory() as session:
                results = import_seed_pool(session, pool, actor=SEED_ACTOR, base_dir=Path.cwd(),
                                           hub=self.fetch_settings, check_params=full_params)
        except RegistryError as exc:
            log.error("seed pool not imported: %s", exc)
            return True  # an unreadable file does not get better by retrying
        served = str(self.settings.target) if self.settings.target is not None else None
        if served is not None and served != pool.target:
            log.warning("seed pool %s is for target %s but the served target is %s: its drafters "
                        "will fail validation unless they fit it (set HEDGESPEC_TARGET to match)",
                        path, pool.target, served)
        log.info("seed pool %s (target %s; drafters only, the served target stays %s): %s",
                 path, pool.target, self.target_dir,
                 {r.drafter_id: r.action for r in results})
        for result in results:
            if result.action == "conflict":
                log.warning("seed drafter %s not imported: %s", result.drafter_id, result.detail)
            elif result.action == "skipped":
                log.warning("seed pool: %s is not a usable drafter: %s", result.subfolder,
                            result.detail)
            elif result.action in ("error", "invalid"):
                log.error("seed pool entry %s not imported: %s", result.drafter_id, result.detail)
        return not any(r.action == "error" for r in results)

    def _retry_seed(self, path: Path) -> None:
        """Background: import the seed pool again until its hub listings succeed."""
        for delay in itertools.chain(SEED_RETRY_S, itertools.repeat(SEED_RETRY_S[-1])):
            if self._stopping.wait(delay):
                return
            if self._import_seed(path):
                self.submit_pending()
                return

    async def _log_requests(self, subscription: Subscription) -> None:
        try:
            async for event in subscription:
                if isinstance(event, RequestFinished) and self.request_log is not None:
                    info = self.runner.info
                    model = self.settings.model_name or (info.model_name if info else None)
                    self.request_log.write(request_log_record(event, model=model))
        finally:
            await subscription.aclose()
