"""Keyword-only CRUD on the registry tables.

Transaction policy: every public mutating function is one transaction. It writes the row, one
audit event (who, what, when) and, for changes that can alter the serving pool, a bump of
`registry_state.pool_version`; then it commits. On error it rolls back and raises one of
`drafter_registry.errors`. The only mutation without audit row and version bump is
`set_progress`, which the downloader calls several times a second and which never changes the
pool.

A model-free drafter (`kind` other than `eagle3`) is registered `ready` in the same transaction:
it has nothing to download or validate. Its kind and parameters are stored as given (their
form checked here, their meaning by the gateway before it calls `create_drafter`).

Status changes are compare-and-set (`expected=`): a downloader that finds its drafter disabled
or deleted meanwhile gets `StatusConflict` and stops instead of overwriting the operator's change.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from drafter_registry.db import begin_write
from drafter_registry.errors import DrafterConflict, DrafterNotFound, InvalidDrafter, StatusConflict
from drafter_registry.identifiers import (
    slugify_drafter_id,
    validate_domain,
    validate_drafter_id,
    validate_kind,
    validate_local_path,
    validate_params,
    validate_repo_id,
    validate_revision,
    validate_source_fields,
    validate_subfolder,
)
from drafter_registry.models import (
    EAGLE3_KIND,
    REGISTRY_STATE_ID,
    UNFINISHED_STATUSES,
    AuditEvent,
    Drafter,
    DrafterSource,
    DrafterStatus,
    RegistryState,
    utcnow,
)
from drafter_registry.schemas import DrafterCreate

DEFAULT_REVISION = "main"
UPDATABLE_FIELDS = frozenset({"name", "domain", "tags", "target_model"})


# --- reads -------------------------------------------------------------------------------------


def get_drafter(session: Session, *, drafter_id: str) -> Drafter | None:
    return session.get(Drafter, drafter_id)


def get_drafter_by_name(session: Session, *, name: str) -> Drafter | None:
    return session.scalar(select(Drafter).where(Drafter.name == name))


def list_drafters(session: Session, *, statuses: Iterable[str] | None = None) -> list[Drafter]:
    """All drafters, oldest first; `statuses` filters (e.g. `["ready"]` for the serving pool)."""
    query = select(Drafter).order_by(Drafter.created_at, Drafter.id)
    if statuses is not None:
        query = query.where(Drafter.status.in_([_status(s).value for s in statuses]))
    return list(session.scalars(query))


def count_drafters(session: Session) -> int:
    return int(session.scalar(select(func.count()).select_from(Drafter)) or 0)


def list_unfinished(session: Session) -> list[Drafter]:
    """Drafters whose download or validation has yet to finish (to resume after a restart)."""
    return list_drafters(session, statuses=UNFINISHED_STATUSES)


def list_events(
    session: Session, *, limit: int = 100, target: str | None = None, before_id: int | None = None
) -> list[AuditEvent]:
    """Audit events, newest first; `before_id` pages backwards."""
    query = select(AuditEvent).order_by(AuditEvent.id.desc()).limit(max(1, min(limit, 1000)))
    if target is not None:
        query = query.where(AuditEvent.target == target)
    if before_id is not None:
        query = query.where(AuditEvent.id < before_id)
    return list(session.scalars(query))


# --- creation ----------------------------------------------------------------------------------


def create_drafter(
    session: Session,
    *,
    name: str,
    actor: str,
    source: str | None = None,
    drafter_id: str | None = None,
    repo_id: str | None = None,
    revision: str | None = None,
    subfolder: str | None = None,
    path: str | None = None,
    domain: str | None = None,
    tags: Iterable[str] = (),
    target_model: str | None = None,
    kind: str = EAGLE3_KIND,
    params: Mapping[str, Any] | None = None,
) -> Drafter:
    """Register a drafter in status `pending` (a fetcher then downloads and validates it), or,
    for a model-free `kind`, `ready` at once with its `params`.

    Without `drafter_id` the id is a slug of `name`, suffixed `-2`, `-3`, ... if taken.
    """
    name = _clean_name(name)
    kind = validate_kind(kind)
    model_free = kind != EAGLE3_KIND
    if source is None:
        if not model_free:
            raise InvalidDrafter("source is required for an eagle3 drafter: 'hf' or 'local'")
        source = DrafterSource.NONE.value
    if source == DrafterSource.HF.value and revision is None:
        revision = DEFAULT_REVISION
    validate_source_fields(
        source=source, repo_id=repo_id, revision=revision, subfolder=subfolder, path=path,
        kind=kind,
    )
    status = DrafterStatus.READY if model_free else DrafterStatus.PENDING
    fields = dict(
        name=name,
        kind=kind,
        params=validate_params(kind, params),
        source=source,
        repo_id=validate_repo_id(repo_id) if repo_id else None,
        revision=validate_revision(revision) if revision else None,
        subfolder=validate_subfolder(subfolder),
        local_path=validate_local_path(path) if path else None,
        domain=validate_domain(domain) if domain else None,
        tags=_clean_tags(tags),
        target_model=target_model,
        status=status.value,
        bytes_done=0,
        ready_at=utcnow() if model_free else None,
    )
    chosen_id = validate_drafter_id(drafter_id) if drafter_id else None
    with _transaction(session, conflict=f"drafter id {drafter_id or name!r} or name {name!r} is "
                                        "already taken"):
        drafter = Drafter(id=chosen_id or _free_id(session, name), **fields)
        session.add(drafter)
        _audit(session, actor=actor, action="drafter.create", target=drafter.id,
               detail=_spec(drafter))
        _bump_pool_version(session)
    return drafter


def create_drafter_from_spec(session: Session, *, spec: DrafterCreate, actor: str) -> Drafter:
    """`create_drafter` from the admin API's validated DTO."""
    return create_drafter(
        session,
        actor=actor,
        drafter_id=spec.id,
        name=spec.name or spec.id or spec.kind,
        kind=spec.kind,
        params=spec.params,
        source=spec.source,
        repo_id=spec.repo_id,
        revision=spec.revision,
        subfolder=spec.subfolder,
        path=spec.path,
        domain=spec.domain,
        tags=spec.tags,
        target_model=spec.target_model,
    )


# --- updates -----------------------------------------------------------------------------------


def update_drafter(
    session: Session, *, drafter_id: str, changes: Mapping[str, Any], actor: str
) -> Drafter:
    """Edit descriptive fields (`name`, `domain`, `tags`, `target_model`); the source is fixed."""
    unknown = set(changes) - UPDATABLE_FIELDS
    if unknown:
        raise InvalidDrafter(f"cannot update {sorted(unknown)}; updatable: "
                             f"{sorted(UPDATABLE_FIELDS)}")
    cleaned = {
        "name": lambda v: _clean_name(v),
        "domain": lambda v: validate_domain(v) if v else None,
        "tags": lambda v: _clean_tags(v or ()),
        "target_model": lambda v: v,
    }
    with _transaction(session, conflict=f"name {changes.get('name')!r} is already taken"):
        drafter = _load(session, drafter_id)
        for field, value in changes.items():
            setattr(drafter, field, cleaned[field](value))
        _audit(session, actor=actor, action="drafter.update", target=drafter_id,
               detail=dict(changes))
        _bump_pool_version(session)
    return drafter


def set_status(
    session: Session,
    *,
    drafter_id: str,
    status: str,
    actor: str,
    error: str | None = None,
    expected: Collection[str] | None = None,
) -> Drafter:
    """Move a drafter to `status`; with `expected`, only from one of those statuses."""
    with _transaction(session):
        drafter = _load(session, drafter_id)
        _transition(session, drafter, to=_status(status), actor=actor, expected=expected,
                    error=error)
    return drafter


def set_progress(session: Session, *, drafter_id: str, bytes_done: int,
                 bytes_total: int | None) -> bool:
    """Record download progress; `False` if the drafter is no longer `downloading` (or gone),
    which tells the downloader to stop."""
    with _transaction(session):
        result = session.execute(
            update(Drafter)
            .where(Drafter.id == drafter_id, Drafter.status == DrafterStatus.DOWNLOADING.value)
            .values(bytes_done=bytes_done, bytes_total=bytes_total, updated_at=utcnow())
            .execution_options(synchronize_session=False)
        )
    return bool(getattr(result, "rowcount", 0))


def start_download(session: Session, *, drafter_id: str, actor: str) -> Drafter:
    """`pending` -> `downloading` (also re-entered when resuming after a crash, including one
    that struck while validating: the files are then re-checked against the hub)."""
    return _move(
        session,
        drafter_id,
        to=DrafterStatus.DOWNLOADING,
        actor=actor,
        expected={DrafterStatus.PENDING.value, DrafterStatus.DOWNLOADING.value,
                  DrafterStatus.VALIDATING.value},
    )


def finish_download(
    session: Session, *, drafter_id: str, local_path: str, commit_sha: str | None, actor: str
) -> Drafter:
    """`downloading` (or `pending`, for local drafters) -> `validating`, recording the files."""
    return _move(
        session,
        drafter_id,
        to=DrafterStatus.VALIDATING,
        actor=actor,
        expected=UNFINISHED_STATUSES,
        local_path=local_path,
        commit_sha=commit_sha,
    )


def mark_ready(
    session: Session, *, drafter_id: str, inspection: Mapping[str, Any] | None, actor: str
) -> Drafter:
    """`validating` -> `ready`: the drafter joins the serving pool at the next pool sync."""
    return _move(
        session,
        drafter_id,
        to=DrafterStatus.READY,
        actor=actor,
        expected={DrafterStatus.VALIDATING.value},
        inspection=dict(inspection) if inspection is not None else None,
    )


def mark_failed(
    session: Session,
    *,
    drafter_id: str,
    error: str,
    actor: str,
    expected: Collection[str] | None = UNFINISHED_STATUSES,
) -> Drafter:
    """-> `failed` with a readable `error`; by default only from an unfinished status."""
    return set_status(
        session, drafter_id=drafter_id, status="failed", error=error, actor=actor, expected=expected
    )


def retry_drafter(session: Session, *, drafter_id: str, actor: str) -> Drafter:
    """`failed` -> `pending`, clearing the error and the progress; a model-free drafter, which
    has nothing to fetch, goes back to `ready` (the pool sync tries to build it again)."""
    with _transaction(session):
        drafter = _load(session, drafter_id)
        expected = {DrafterStatus.FAILED.value}
        if drafter.model_free:
            _transition(session, drafter, to=DrafterStatus.READY, actor=actor, expected=expected,
                        error=None)
        else:
            _transition(session, drafter, to=DrafterStatus.PENDING, actor=actor,
                        expected=expected, error=None, bytes_done=0, bytes_total=None)
    return drafter


def set_enabled(session: Session, *, drafter_id: str, enabled: bool, actor: str) -> Drafter:
    """Disable (leaves the pool, any download stops) or enable a drafter. Enabling returns it to
    `ready` if it was validated before and its files are recorded (or it is model-free),
    otherwise to `pending`."""
    with _transaction(session):
        drafter = _load(session, drafter_id)
        if enabled == (drafter.status != DrafterStatus.DISABLED.value):
            return drafter  # already as asked: nothing to change, nothing to audit
        if not enabled:
            target = DrafterStatus.DISABLED
        elif drafter.model_free or (drafter.ready_at is not None and drafter.local_path):
            target = DrafterStatus.READY
        else:
            target = DrafterStatus.PENDING
        _transition(session, drafter, to=target, actor=actor, expected=None, error=None)
    return drafter


def delete_drafter(session: Session, *, drafter_id: str, actor: str) -> Drafter:
    """Remove a drafter row (cached files stay: blobs may be shared with other drafters)."""
    with _transaction(session):
        drafter = _load(session, drafter_id)
        session.delete(drafter)
        _audit(session, actor=actor, action="drafter.delete", target=drafter_id,
               detail=_spec(drafter))
        _bump_pool_version(session)
    return drafter


def record_event(
    session: Session,
    *,
    actor: str,
    action: str,
    target: str | None = None,
    detail: Mapping[str, Any] | None = None,
) -> AuditEvent:
    """Append an audit event on its own (e.g. `pool.sync` from the gateway)."""
    with _transaction(session):
        event = _audit(session, actor=actor, action=action, target=target, detail=detail)
    return event


# --- helpers -----------------------------------------------------------------------------------


def _load(session: Session, drafter_id: str) -> Drafter:
    drafter = session.get(Drafter, drafter_id)
    if drafter is None:
        raise DrafterNotFound(drafter_id)
    return drafter


def _status(value: str) -> DrafterStatus:
    try:
        return DrafterStatus(value)
    except ValueError:
        allowed = ", ".join(s.value for s in DrafterStatus)
        raise InvalidDrafter(f"unknown status {value!r}: expected one of {allowed}") from None


def _move(
    session: Session,
    drafter_id: str,
    *,
    to: DrafterStatus,
    actor: str,
    expected: Collection[str],
    **fields: Any,
) -> Drafter:
    with _transaction(session):
        drafter = _load(session, drafter_id)
        _transition(session, drafter, to=to, actor=actor, expected=expected, error=None, **fields)
    return drafter


def _transition(
    session: Session,
    drafter: Drafter,
    *,
    to: DrafterStatus,
    actor: str,
    expected: Collection[str] | None,
    error: str | None,
    **fields: Any,
) -> None:
    before = drafter.status
    if expected is not None and before not in {_status(s).value for s in expected}:
        raise StatusConflict(
            f"drafter {drafter.id!r} is {before}; cannot move it to {to.value}"
            f" (allowed from: {', '.join(sorted(str(_status(s).value) for s in expected))})"
        )
    drafter.status = to.value
    drafter.error = error if to is DrafterStatus.FAILED else None
    for field, value in fields.items():
        setattr(drafter, field, value)
    if to is DrafterStatus.READY and drafter.ready_at is None:
        drafter.ready_at = utcnow()
    detail: dict[str, Any] = {"from": before, "to": to.value}
    if error is not None:
        detail["error"] = error
    _audit(session, actor=actor, action="drafter.status", target=drafter.id, detail=detail)
    _bump_pool_version(session)


def _audit(
    session: Session,
    *,
    actor: str,
    action: str,
    target: str | None,
    detail: Mapping[str, Any] | None,
) -> AuditEvent:
    event = AuditEvent(actor=actor[:64], action=action[:64], target=target,
                       detail=dict(detail) if detail is not None else None)
    session.add(event)
    return event


def _bump_pool_version(session: Session) -> None:
    # An in-place increment: concurrent writers (replicas on PostgreSQL) serialise on the row.
    result = session.execute(
        update(RegistryState)
        .where(RegistryState.id == REGISTRY_STATE_ID)
        .values(pool_version=RegistryState.pool_version + 1, updated_at=utcnow())
        .execution_options(synchronize_session=False)
    )
    if not getattr(result, "rowcount", 0):
        # Schemas made by `create_all` (not by the migration) start without the counter row.
        session.add(RegistryState(id=REGISTRY_STATE_ID, pool_version=1, updated_at=utcnow()))


@contextmanager
def _transaction(session: Session, *, conflict: str | None = None) -> Iterator[None]:
    """Commit what the block did, or roll all of it back; unique violations (also when an
    autoflush hits them inside the block) become `DrafterConflict`."""
    begin_write(session)
    try:
        yield
        session.commit()
    except IntegrityError as exc:
        session.rollback()
        raise DrafterConflict(conflict or f"conflicting change: {exc.orig}") from exc
    except BaseException:
        session.rollback()
        raise


def _free_id(session: Session, name: str) -> str:
    base = slugify_drafter_id(name)
    taken = set(
        session.scalars(
            select(Drafter.id).where(
                (Drafter.id == base) | Drafter.id.like(f"{base[:58]}-%")
            )
        )
    )
    if base not in taken:
        return base
    suffix = 2
    while f"{base[:58]}-{suffix}" in taken:
        suffix += 1
    return f"{base[:58]}-{suffix}"


def _clean_name(name: str) -> str:
    cleaned = " ".join(name.split())
    if not 1 <= len(cleaned) <= 128:
        raise InvalidDrafter("name must have 1 to 128 characters")
    return cleaned


def _clean_tags(tags: Iterable[str]) -> list[str]:
    return sorted({validate_domain(t) for t in tags})


def _spec(drafter: Drafter) -> dict[str, Any]:
    keys = ("name", "kind", "params", "source", "repo_id", "revision", "subfolder", "local_path",
            "domain")
    return {k: getattr(drafter, k) for k in keys if getattr(drafter, k) is not None}

