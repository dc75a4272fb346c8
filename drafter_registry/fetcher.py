"""Background fetching: take a `pending` drafter to `ready` or `failed`, off the request path.

    pending ─▶ downloading (hf only, byte progress in the row) ─▶ validating ─▶ ready | failed

Validation is two-stage: the registry's own torch-free checks (`validation.check_checkpoint`,
plus `check_against_target` when the target directory is known), then the injected `validator`,
which the gateway binds to `core.model.drafter_check.inspect_drafter` against the served target (the
same check as `hedgespec drafter inspect`). The registry never imports torch, nor any of core but
the torch-free checkpoint format: the gateway passes the function in.

Failure is contained: every exception ends in `failed` with a readable `error`, and nothing here
touches the serving pool; a drafter joins the pool only when the gateway's pool sync sees `ready`
(through `pool_version`). If the operator disables or deletes the drafter meanwhile, the next
progress write notices, the download stops, and the operator's change is kept.

After a crash or restart, `DrafterFetcher.resume_unfinished()` re-submits every drafter left in
`pending`, `downloading` or `validating`; downloads resume from the bytes already in the cache.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from drafter_registry import crud
from drafter_registry.errors import (
    DownloadCancelled,
    DrafterNotFound,
    RegistryError,
    StatusConflict,
)
from drafter_registry.hub import ProgressCallback, download_drafter
from drafter_registry.models import UNFINISHED_STATUSES, Drafter, DrafterSource
from drafter_registry.validation import check_against_target, check_checkpoint

logger = logging.getLogger(__name__)

Validator = Callable[[Path], Mapping[str, Any]]
"""Full check of a drafter directory against the served target. Returns a report with at least
`compatible: bool` and `reason: str | None` (the JSON form of `core.model.drafter_check`'s
`DrafterInspection`, which the registry stores with the drafter)."""


@dataclass(frozen=True)
class FetchSettings:
    cache_dir: Path
    endpoint: str | None = None  # None: HF_ENDPOINT, else huggingface.co
    token: str | None = None
    target_dir: Path | None = None  # enables the cheap config check against the target
    progress_interval_s: float = 0.5


@dataclass(frozen=True)
class _Job:
    """The fields of a drafter row a fetch needs, read once (rows do not cross threads)."""

    id: str
    source: str
    repo_id: str | None
    revision: str | None
    subfolder: str | None
    local_path: str | None
    model_free: bool = False

    @classmethod
    def of(cls, row: Drafter) -> _Job:
        return cls(row.id, row.source, row.repo_id, row.revision, row.subfolder, row.local_path,
                   row.model_free)


def fetch_drafter(
    session_factory: sessionmaker[Session],
    *,
    drafter_id: str,
    settings: FetchSettings,
    validator: Validator | None = None,
    actor: str = "system",
    stop: threading.Event | None = None,
) -> str | None:
    """Run one drafter to `ready` or `failed`; returns the final status, or `None` when the
    drafter was deleted, disabled or moved on by someone else meanwhile, or when `stop` was set
    (shutdown: the row stays `downloading` and the next start resumes it)."""
    with session_factory() as session:
        row = crud.get_drafter(session, drafter_id=drafter_id)
        if row is None:
            return None
        job = _Job.of(row)
    try:
        if job.model_free:  # nothing to fetch: registered `ready`; only a stray submit gets here
            with session_factory() as session:
                crud.set_status(session, drafter_id=job.id, status="ready", actor=actor,
                                expected=UNFINISHED_STATUSES)
            return "ready"
        path, commit = _obtain(session_factory, job, settings, actor, stop)
        with session_factory() as session:
            crud.finish_download(session, drafter_id=job.id, local_path=str(path),
                                 commit_sha=commit, actor=actor)
        inspection = validate_drafter_dir(path, settings=settings, validator=validator)
        with session_factory() as session:
            crud.mark_ready(session, drafter_id=job.id, inspection=inspection, actor=actor)
        return "ready"
    except (StatusConflict, DrafterNotFound, DownloadCancelled) as exc:
        logger.info("fetch of drafter %s stopped: %s", job.id, exc)
        return None
    except Exception as exc:  # contained: any failure becomes a readable `error`
        return _fail(session_factory, job.id, readable_error(exc), actor)


def validate_drafter_dir(
    path: Path, *, settings: FetchSettings, validator: Validator | None
) -> dict[str, Any]:
    """Cheap checks, then the injected full check; raises `CheckpointError` or `RegistryError`."""
    summary = check_checkpoint(path)
    if settings.target_dir is not None:
        check_against_target(summary, settings.target_dir)
    report: dict[str, Any] = summary.as_dict()
    if validator is not None:
        verdict = dict(validator(path))
        if not verdict.get("compatible"):
            raise RegistryError(str(verdict.get("reason") or "incompatible with the served target"))
        report.update(verdict)
    return report


def readable_error(exc: BaseException) -> str:
    """Registry errors are written for operators; anything else gets its type name in front."""
    if isinstance(exc, RegistryError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


def ensure_local_copy(drafter: Drafter, *, settings: FetchSettings) -> Path:
    """The directory of a `ready` drafter on this machine, downloading its pinned commit if this
    replica's cache lacks it (replicas that do not share a cache volume call this in pool sync)."""
    if drafter.source == DrafterSource.LOCAL.value:
        return Path(str(drafter.local_path)).expanduser()
    if drafter.local_path and Path(drafter.local_path).is_dir():
        return Path(drafter.local_path)
    result = download_drafter(
        repo_id=str(drafter.repo_id),
        revision=drafter.commit_sha or drafter.revision,
        subfolder=drafter.subfolder,
        cache_dir=settings.cache_dir,
        token=settings.token,
        endpoint=settings.endpoint,
    )
    return result.local_path


def _obtain(session_factory: sessionmaker[Session], job: _Job, settings: FetchSettings,
            actor: str, stop: threading.Event | None) -> tuple[Path, str | None]:
    """The drafter's directory and, for hf drafters, the commit it was downloaded at."""
    if job.source == DrafterSource.LOCAL.value:
        return Path(str(job.local_path)).expanduser(), None
    with session_factory() as session:
        crud.start_download(session, drafter_id=job.id, actor=actor)
    result = download_drafter(
        repo_id=str(job.repo_id),
        revision=job.revision,
        subfolder=job.subfolder,
        cache_dir=settings.cache_dir,
        progress=_progress_writer(session_factory, job.id, stop),
        token=settings.token,
        endpoint=settings.endpoint,
        progress_interval_s=settings.progress_interval_s,
    )
    return result.local_path, result.commit_sha


def _progress_writer(session_factory: sessionmaker[Session], drafter_id: str,
                     stop: threading.Event | None) -> ProgressCallback:
    def write(done: int, total: int) -> None:
        if stop is not None and stop.is_set():
            raise DownloadCancelled("the gateway is shutting down; the download resumes on restart")
        with session_factory() as session:
            if not crud.set_progress(session, drafter_id=drafter_id, bytes_done=done,
                                     bytes_total=total):
                raise DownloadCancelled(f"drafter {drafter_id!r} is no longer downloading")

    return write


def _fail(session_factory: sessionmaker[Session], drafter_id: str, error: str,
          actor: str) -> str | None:
    logger.warning("drafter %s failed: %s", drafter_id, error)
    try:
        with session_factory() as session:
            crud.mark_failed(session, drafter_id=drafter_id, error=error, actor=actor)
        return "failed"
    except (StatusConflict, DrafterNotFound):
        return None


class DrafterFetcher:
    """A small thread pool running `fetch_drafter` jobs; one job per drafter at a time."""

    def __init__(
        self,
        session_factory: sessionmaker[Session],
        settings: FetchSettings,
        *,
        validator: Validator | None = None,
        max_workers: int = 2,
        actor: str = "system",
    ) -> None:
        self._session_factory, self._settings = session_factory, settings
        self._validator, self._actor = validator, actor
        self._pool = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="drafter-fetch")
        self._inflight: dict[str, Future[str | None]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()

    def submit(self, drafter_id: str) -> Future[str | None]:
        """Queue a drafter (no-op if it is already queued or running); the future yields the
        final status as `fetch_drafter` returns it."""
        with self._lock:
            running = self._inflight.get(drafter_id)
            if running is not None and not running.done():
                return running
            future = self._pool.submit(
                fetch_drafter, self._session_factory, drafter_id=drafter_id,
                settings=self._settings, validator=self._validator, actor=self._actor,
                stop=self._stop,
            )
            self._inflight[drafter_id] = future
        # Outside the lock: a job that already finished (a corrupt drafter fails in
        # milliseconds) runs the callback right here, and `_forget` takes the lock.
        future.add_done_callback(lambda _f: self._forget(drafter_id, _f))
        return future

    def resume_unfinished(self) -> list[str]:
        """Submit every drafter left unfinished by a crash or restart; returns their ids."""
        with self._session_factory() as session:
            ids = [d.id for d in crud.list_unfinished(session)]
        for drafter_id in ids:
            self.submit(drafter_id)
        return ids

    def shutdown(self, *, wait: bool = True) -> None:
        """Stop queued jobs and interrupt running downloads at their next chunk; interrupted
        drafters stay `downloading` and `resume_unfinished` continues them on the next start."""
        self._stop.set()
        self._pool.shutdown(wait=wait, cancel_futures=True)

    def _forget(self, drafter_id: str, future: Future[str | None]) -> None:
        with self._lock:
            if self._inflight.get(drafter_id) is future:
                del self._inflight[drafter_id]
