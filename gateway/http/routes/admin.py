"""The admin pool API: the drafter registry over HTTP (what the admin page's Pool tab calls).

    GET    /admin/api/drafters               list, with status, progress and `serving` (here)
    POST   /admin/api/drafters               register {name, source: hf|local, repo_id, revision,
                                             subfolder, path, domain, id?, tags?} -> 202 + drafter;
                                             model-free: {kind: ngram|suffix, params?, id?, name?,
                                             domain?, tags?} -> 201 + drafter, ready and serving
    POST   /admin/api/drafters/discover      register every drafter under a folder of a Hub repo
                                             {repo_id, prefix, revision?, id_prefix?, name_prefix?,
                                             domains?, tags?, dry_run?} -> 202 (200 for a dry run)
    GET    /admin/api/drafters/{id}          one drafter
    PATCH  /admin/api/drafters/{id}          {"enabled": bool} and/or name, domain, tags
    DELETE /admin/api/drafters/{id}          remove (leaves the pool for new requests)
    POST   /admin/api/drafters/{id}/retry    failed -> pending, fetched again -> 202
    GET    /admin/api/events                 the audit log, newest first (?limit, target, before_id)
    GET    /admin/api/pool                   this replica's pool sync state

Auth as every `/admin/api/*` route: the admin key as a bearer token (`require_admin_key`); no
admin key configured means 403 `admin_disabled`, never open.

Routes are thin: validation is the registry's DTOs and CRUD, the work is `RegistryService`.
They are plain `def` functions, so FastAPI runs their blocking database calls in its thread
pool, off the event loop. A POST returns 202 at once: downloading and validating happen in the
background, and a drafter becomes usable when its `status` is `ready` (on this replica at that
moment; other replicas follow within about `pool_sync_interval_s`). A model-free drafter (no
weights) has nothing to fetch: its kind and parameters are checked against the engine's kinds
(`gateway.pool.model_free`; a 400 naming `kind` or `params` otherwise), the row is written
`ready` with every parameter (defaults filled in), this replica's pool sync runs at once, and
the answer is 201 with the drafter serving here.

Errors are OpenAI-shaped: 400 for invalid fields, 404 for an unknown id, 409 for a taken id or
name and for an action the drafter's status does not allow, 503 when the registry database is
unavailable. Discovery adds: 404 `hub_not_found` (no such repository or revision, or private),
404 `no_drafters_found` (nothing usable under the prefix; the message says what is there), 502
`hub_error` (the Hub could not be listed: network, token, `HF_HUB_OFFLINE`); nothing is written
then. Its listing blocks this route's worker thread for the Hub's answer (one listing plus one
small config.json per folder).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from fastapi import APIRouter, Depends, Query
from fastapi.responses import JSONResponse
from pydantic import ConfigDict, StrictBool
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from drafter_registry import crud
from drafter_registry.db import pool_version
from drafter_registry.discovery import discover_and_register
from drafter_registry.errors import (
    DrafterConflict,
    DrafterNotFound,
    HubError,
    HubNotFound,
    InvalidDrafter,
    InvalidIdentifier,
    NothingDiscovered,
    StatusConflict,
)
from drafter_registry.models import Drafter, DrafterStatus
from drafter_registry.schemas import (
    AuditEventPublic,
    DiscoverSpec,
    DrafterCreate,
    DrafterPublic,
    DrafterUpdate,
)
from gateway.errors import APIError
from gateway.http.auth import require_admin_key
from gateway.http.deps import RegistryServiceDep, RunnerDep
from gateway.pool.model_free import ModelFreeError, full_params
from gateway.pool.registry import RegistryService
from gateway.runner import EngineRunner

T = TypeVar("T")
ACTOR = "admin-api"
log = logging.getLogger(__name__)

router = APIRouter(prefix="/admin/api", tags=["admin"], dependencies=[Depends(require_admin_key)])


class DiscoverRequest(DiscoverSpec):
    """POST /drafters/discover body: a `DiscoverSpec` plus `dry_run`."""

    dry_run: StrictBool = False


class DrafterPatch(DrafterUpdate):
    """PATCH body: `enabled` plus the descriptive fields; strict so `"no"` is not `True`."""

    model_config = ConfigDict(extra="forbid")

    enabled: StrictBool | None = None


@contextmanager
def _session(service: RegistryService) -> Iterator[Session]:
    """A session whose registry errors become OpenAI-shaped client errors."""
    assert service.session_factory is not None
    try:
        with service.session_factory() as session:
            yield session
    except DrafterNotFound as exc:
        raise APIError(str(exc), status=404, code="drafter_not_found") from None
    except DrafterConflict as exc:
        raise APIError(str(exc), status=409, code="conflict") from None
    except StatusConflict as exc:
        raise APIError(str(exc), status=409, code="invalid_status") from None
    except (InvalidDrafter, InvalidIdentifier) as exc:
        raise APIError(str(exc), status=400, code="invalid_value") from None
    except SQLAlchemyError as exc:
        raise APIError(f"The registry database failed: {type(exc).__name__}.", status=503,
                       type="server_error", code="registry_unavailable") from None


def _public(drafter: Drafter, serving: set[str]) -> dict[str, Any]:
    body = DrafterPublic.model_validate(drafter).model_dump(mode="json")
    body["enabled"] = drafter.status != DrafterStatus.DISABLED.value
    body["serving"] = drafter.id in serving  # in this replica's engine right now
    return body


def _serving(runner: EngineRunner) -> set[str]:
    info = runner.info
    return set(info.drafter_ids) if info is not None else set()


def _one(service: RegistryService, fn: Callable[[Session], T]) -> T:
    with _session(service) as session:
        return fn(session)


@router.get("/drafters")
def list_drafters(service: RegistryServiceDep, runner: RunnerDep) -> JSONResponse:
    with _session(service) as session:
        version = pool_version(session)
        rows = crud.list_drafters(session)
    serving = _serving(runner)
    data = [_public(d, serving) for d in rows]
    return JSONResponse({"data": data, "count": len(data), "pool_version": version})


@router.post("/drafters", status_code=202)
def create_drafter(
    spec: DrafterCreate, service: RegistryServiceDep, runner: RunnerDep
) -> JSONResponse:
    if spec.model_free:
        return _create_model_free(spec, service, runner)
    if spec.path is not None:
        # A path on the server's disk: relative means relative to its working directory, and
        # is stored absolute so other replicas and the CLI read the same directory.
        spec = spec.model_copy(update={"path": str(Path(spec.path).expanduser().resolve())})
    drafter = _one(service, lambda s: crud.create_drafter_from_spec(s, spec=spec, actor=ACTOR))
    service.submit(drafter.id)
    return JSONResponse(_public(drafter, _serving(runner)), status_code=202)


def _create_model_free(spec: DrafterCreate, service: RegistryService,
                       runner: EngineRunner) -> JSONResponse:
    try:
        params = full_params(spec.kind, spec.params)
    except ModelFreeError as exc:
        raise APIError(str(exc), status=400, param=exc.param, code="invalid_value") from None
    spec = spec.model_copy(update={"params": params})
    drafter = _one(service, lambda s: crud.create_drafter_from_spec(s, spec=spec, actor=ACTOR))
    if service.pool_sync is not None:
        try:  # serve it here before answering (the sync thread would within an interval)
            service.pool_sync.sync_now()
        except Exception as exc:  # the database or the engine: the sync thread retries
            log.warning("pool sync after adding %s failed: %s", drafter.id, exc)
    return JSONResponse(_public(_reloaded(service, drafter), _serving(runner)), status_code=201)


def _reloaded(service: RegistryService, drafter: Drafter) -> Drafter:
    """The row as it is now (the sync may have marked it failed), else as it was written."""
    with contextlib.suppress(APIError):
        fresh = _one(service, lambda s: crud.get_drafter(s, drafter_id=drafter.id))
        if fresh is not None:
            return fresh
    return drafter


@router.post("/drafters/discover", status_code=202)
def discover_drafters(body: DiscoverRequest, service: RegistryServiceDep) -> JSONResponse:
    """Every drafter under `prefix` of `repo_id` becomes a `pending` drafter (one code path
    with the CLI and seed pools: `drafter_registry.discovery`), fetched and validated in the
    background like a single POST /drafters."""
    spec = DiscoverSpec.model_validate(body.model_dump(exclude={"dry_run"}))
    hub = service.fetch_settings
    try:
        report = _one(service, lambda s: discover_and_register(
            s, spec, actor=ACTOR, cache_dir=hub.cache_dir, token=hub.token,
            endpoint=hub.endpoint, dry_run=body.dry_run))
    except HubNotFound as exc:
        raise APIError(str(exc), status=404, code="hub_not_found", param="repo_id") from None
    except NothingDiscovered as exc:
        raise APIError(str(exc), status=404, code="no_drafters_found", param="prefix") from None
    except HubError as exc:
        raise APIError(str(exc), status=502, type="server_error", code="hub_error") from None
    for drafter_id in report.created:
        service.submit(drafter_id)
    body_out = {"object": "drafter.discovery", **report.as_dict()}
    return JSONResponse(body_out, status_code=200 if body.dry_run else 202)


@router.get("/drafters/{drafter_id}")
def get_drafter(drafter_id: str, service: RegistryServiceDep, runner: RunnerDep) -> JSONResponse:
    drafter = _one(service, lambda s: crud.get_drafter(s, drafter_id=drafter_id))
    if drafter is None:
        raise APIError(f"drafter {drafter_id!r} not found", status=404, code="drafter_not_found")
    return JSONResponse(_public(drafter, _serving(runner)))


@router.patch("/drafters/{drafter_id}")
def patch_drafter(
    drafter_id: str, patch: DrafterPatch, service: RegistryServiceDep, runner: RunnerDep
) -> JSONResponse:
    changes = patch.model_dump(exclude_unset=True, exclude={"enabled"})
    with _session(service) as session:
        drafter = crud.get_drafter(session, drafter_id=drafter_id)
        if drafter is None:
            raise DrafterNotFound(drafter_id)
        if changes:
            drafter = crud.update_drafter(session, drafter_id=drafter_id, changes=changes,
                                          actor=ACTOR)
        if patch.enabled is not None:
            drafter = crud.set_enabled(session, drafter_id=drafter_id, enabled=patch.enabled,
                                       actor=ACTOR)
    if drafter.status == DrafterStatus.PENDING.value:
        service.submit(drafter_id)  # re-enabled before it was ever validated: fetch it now
    return JSONResponse(_public(drafter, _serving(runner)))


@router.delete("/drafters/{drafter_id}")
def delete_drafter(drafter_id: str, service: RegistryServiceDep) -> JSONResponse:
    _one(service, lambda s: crud.delete_drafter(s, drafter_id=drafter_id, actor=ACTOR))
    return JSONResponse({"id": drafter_id, "object": "drafter", "deleted": True})


@router.post("/drafters/{drafter_id}/retry", status_code=202)
def retry_drafter(drafter_id: str, service: RegistryServiceDep, runner: RunnerDep) -> JSONResponse:
    drafter = _one(service, lambda s: crud.retry_drafter(s, drafter_id=drafter_id, actor=ACTOR))
    if drafter.model_free:  # back to ready: the pool sync builds it again
        if service.pool_sync is not None:
            service.pool_sync.wake()
    else:
        service.submit(drafter_id)
    return JSONResponse(_public(drafter, _serving(runner)), status_code=202)


@router.get("/events")
def list_events(
    service: RegistryServiceDep,
    limit: int = Query(default=100, ge=1, le=1000),
    target: str | None = Query(default=None, max_length=64),
    before_id: int | None = Query(default=None, ge=1),
) -> JSONResponse:
    with _session(service) as session:
        events = crud.list_events(session, limit=limit, target=target, before_id=before_id)
    data = [AuditEventPublic.model_validate(e).model_dump(mode="json") for e in events]
    return JSONResponse({"data": data, "count": len(data)})


@router.get("/pool")
def pool_state(service: RegistryServiceDep, runner: RunnerDep) -> JSONResponse:
    """Whether this replica's engine matches the registry (convergence, for operators)."""
    with _session(service) as session:
        version = pool_version(session)
    sync = service.pool_sync.status if service.pool_sync is not None else None
    return JSONResponse({
        "replica": service.replica,
        "pool_version": version,
        "synced_version": sync.synced_version if sync else None,
        "in_sync": sync is not None and sync.synced_version == version,
        "last_sync_at": sync.last_sync_at if sync else None,
        "last_error": sync.last_error if sync else None,
        "recent_changes": sync.changes if sync else [],
        "serving": sorted(_serving(runner)),
    })
