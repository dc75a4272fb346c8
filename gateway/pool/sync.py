"""Registry rows -> engine pool: hot add and remove of drafters, and multi-replica refresh.

The registry is the source of truth for the serving pool: the engine serves exactly the drafters
whose row is `ready` (which excludes `disabled`), plus the "unmanaged" drafters of the served
pool file that could not be registered (an id the registry refuses; see `registry_service`).

How it converges (polling, not LISTEN/NOTIFY; `drafter_registry` explains the choice):

- A daemon thread reads `registry_state.pool_version` (one primary-key lookup) every
  `interval_s`. When it moved, or when `wake()` asks, it runs one sync pass: read the ready rows,
  compare them with what the engine holds, remove what is no longer wanted, load what is missing.
  Every replica sharing the database does the same, so all converge within about one interval
  plus the time to load a drafter.
- A drafter is identified by the weights it stands for (`drafter_key`: a local directory, or a
  Hub repo at a pinned commit and sub-folder; a model-free drafter by its kind and parameters),
  so re-registering an id with other weights replaces the drafter instead of keeping the old
  one.
- A model-free row (`ngram`, `suffix`: no weights) is built here from its kind and parameters
  (`gateway.pool.model_free`) and added with `RuntimePool.add_model_free`; one the engine
  refuses (a kind this replica does not know) is marked `failed` like a drafter that does not
  load.
- Weights are loaded on this thread (`RuntimePool.load_drafter` only reads the target's
  embedding, dtype and device), and only the pool swap (`add_loaded_drafter`, `remove_drafter`)
  runs on the engine worker thread, between two rounds, because `SpecEngine` is not thread-safe
  (`gateway.pool.engine_pool`). A large drafter therefore never stalls serving while it loads.
  An engine whose `runtime_pool()` is None (its pool fixed at load) turns the sync off.
- Requests in flight keep the pool snapshot they started with
(`core.speculation.drafter_pool.PoolSnapshot`);
  a removed drafter's memory is freed when the last request holding that snapshot ends.
- A drafter that fails to load here is marked `failed` with the reason, so the registry never
  shows `ready` for something the replicas cannot serve; the rest of the pool is untouched.
- `preload` lets the local fetcher put a validated drafter into the engine *before* its row
  becomes `ready` (pinned until the fetch ends), so `ready` means "usable now" on the replica
  that validated it. Other replicas follow at their next pass.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from drafter_registry import crud
from drafter_registry.db import pool_version
from drafter_registry.errors import DrafterNotFound, StatusConflict
from drafter_registry.models import Drafter, DrafterSource, DrafterStatus
from gateway.pool.engine_pool import EnginePool
from gateway.pool.model_free import build as build_model_free
from gateway.pool.model_free import model_free_key
from gateway.runner import EngineRunner

log = logging.getLogger(__name__)

ACTOR = "pool-sync"

Resolver = Callable[[Drafter], Path]
"""The local directory of a `ready` row (downloads the pinned commit if this replica lacks it)."""


def drafter_key(row: Drafter) -> str:
    """What identifies a drafter's weights across replicas (local paths of Hub downloads differ
    between replicas that do not share a cache, the repo, commit and sub-folder do not)."""
    if row.model_free:
        return model_free_key(row.kind, row.params)
    if row.source == DrafterSource.HF.value:
        return f"hf:{row.repo_id}@{row.commit_sha or row.revision}/{row.subfolder or ''}"
    return local_key(Path(str(row.local_path)))


def local_key(path: Path) -> str:
    return f"local:{path.expanduser().resolve()}"


def plan(
    loaded: Mapping[str, str | None], wanted: Mapping[str, str], keep: Collection[str]
) -> tuple[list[str], list[str]]:
    """`(remove, add)` turning the engine's pool `loaded` (id -> key, None if unknown) into
    `wanted`; ids in `keep` are never removed. A changed key is a remove plus an add."""
    remove = [i for i, key in loaded.items()
              if i not in keep and (i not in wanted or wanted[i] != key)]
    add = [i for i, key in wanted.items() if loaded.get(i) != key]
    return remove, add


@dataclass
class SyncStatus:
    """What the admin API reports about this replica's pool."""

    synced_version: int | None = None  # registry pool_version the engine last matched
    last_sync_at: float | None = None
    last_error: str | None = None
    passes: int = 0
    changes: list[dict[str, Any]] = field(default_factory=list)  # the last few add/remove sets


class PoolSync:
    def __init__(
        self,
        runner: EngineRunner,
        session_factory: sessionmaker[Session],
        *,
        resolve: Resolver,
        interval_s: float = 1.0,
        initial: Mapping[str, str] | None = None,
        unmanaged: Iterable[str] = (),
        on_version_change: Callable[[], None] | None = None,
        replica: str = "gateway",
    ) -> None:
        self._runner = runner
        self._pool = EnginePool(runner)
        self._session_factory = session_factory
        self._resolve = resolve
        self.interval_s = interval_s
        self._on_version_change = on_version_change
        self.replica = replica
        # id -> key of what the engine holds; seeded with the served pool the engine loaded.
        self._keys: dict[str, str] = dict(initial or {})
        self._unmanaged = frozenset(unmanaged)
        self._pinned: dict[str, int] = {}  # preloaded by the local fetcher, not yet `ready`
        self._lock = threading.Lock()  # one pool change at a time (sync pass or preload)
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._forced = False
        self._seen_version: int | None = None
        self.status = SyncStatus()
        self._thread = threading.Thread(target=self._main, name="pool-sync", daemon=True)

    # ---- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    def wake(self) -> None:
        """Run a sync pass now, whether or not the version moved (e.g. a local fetch ended)."""
        self._forced = True
        self._wake.set()

    # ---- the local fetcher's fast path ---------------------------------------------------------

    def preload(self, entries: Mapping[str, str], path: Path) -> bool:
        """Load the drafter at `path` and add it to the engine under every id of `entries`
        (id -> key), pinned until `release(id)`; `False` when the engine cannot take drafters
        (not loaded yet, or a test double). Raises what loading or the engine's check raises."""
        if not entries or not self._runner.ready or not self._pool.editable():
            return False
        drafter = self._pool.loader()(path)
        with self._lock:
            for drafter_id in entries:
                self._pinned[drafter_id] = self._pinned.get(drafter_id, 0) + 1
            try:
                self._pool.add_loaded(entries, drafter)
            except BaseException:
                self._unpin(entries)
                raise
            self._keys.update(entries)
        self._record_change(None, added=list(entries), removed=[])
        return True

    def release(self, drafter_id: str) -> None:
        """The fetch that preloaded `drafter_id` ended: reconcile with its final status now."""
        with self._lock:
            self._unpin([drafter_id])
        self.wake()

    # ---- the sync thread -----------------------------------------------------------------------

    def _main(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.interval_s)
            self._wake.clear()
            if self._stop.is_set():
                return
            if not self._runner.ready:
                continue  # still loading (or failed to load, or draining): nothing to sync into
            try:
                self.poll()
            except Exception as exc:  # the database or the engine: retry at the next interval
                self._record_error(f"{type(exc).__name__}: {exc}")

    def poll(self) -> bool:
        """One poll: a sync pass if the version moved (or one was asked for); whether it ran."""
        with self._session_factory() as session:
            version = pool_version(session)
        moved = version != self._seen_version
        if not moved and not self._forced and self.status.synced_version == version:
            return False
        self._forced = False
        if moved:
            if self._on_version_change is not None:
                self._on_version_change()  # e.g. pick up drafters added by the CLI
            self._seen_version = version  # only once handled: a failure retries the callback
        self.sync(version)
        return True

    def sync_now(self) -> bool:
        """One sync pass now, on the caller's thread (the admin API, so that a model-free drafter
        it just registered serves when the response leaves); `False` while the engine is not
        ready (the sync thread catches up once it is)."""
        if not self._runner.ready:
            return False
        with self._session_factory() as session:
            version = pool_version(session)
        self.sync(version)
        return True

    def sync(self, version: int) -> None:
        """Make the engine hold exactly the registry's ready drafters (plus unmanaged ones)."""
        if not self._pool.editable():
            return
        with self._lock:
            with self._session_factory() as session:
                rows = {r.id: r
                        for r in crud.list_drafters(session, statuses=[DrafterStatus.READY])}
            loaded = {i: self._keys.get(i) for i in self._pool.drafter_ids()}
            wanted = {i: drafter_key(r) for i, r in rows.items()}
            remove, add = plan(loaded, wanted, keep={*self._unmanaged, *self._pinned})
            if remove:
                self._pool.remove(remove)
                for drafter_id in remove:
                    self._keys.pop(drafter_id, None)
            added, failed = [], {}
            for drafter_id in add:
                error = self._add(rows[drafter_id], wanted[drafter_id])
                if error is None:
                    added.append(drafter_id)
                else:
                    failed[drafter_id] = error
        self._finish_pass(version, added, remove, failed)

    def _add(self, row: Drafter, key: str) -> str | None:
        """Load one drafter into the engine; the readable reason if it could not be."""
        try:
            if row.model_free:
                self._pool.add_model_free(row.id, build_model_free(row.kind, row.params))
            else:
                drafter = self._pool.loader()(self._resolve(row))
                self._pool.add_loaded([row.id], drafter)
        except (TimeoutError, concurrent.futures.TimeoutError):
            raise  # the worker is stuck or gone: retry the whole pass later, blame no drafter
        except Exception as exc:
            return f"{type(exc).__name__}: {exc}"
        self._keys[row.id] = key
        return None

    def _finish_pass(self, version: int, added: list[str], removed: list[str],
                     failed: dict[str, str]) -> None:
        for drafter_id, error in failed.items():
            reason = f"could not be loaded into the engine on {self.replica}: {error}"
            log.warning("drafter %s %s", drafter_id, reason)
            try:
                with self._session_factory() as session:
                    crud.mark_failed(session, drafter_id=drafter_id, error=reason, actor=ACTOR,
                                     expected={DrafterStatus.READY.value})
            except (StatusConflict, DrafterNotFound):
                pass  # changed meanwhile: the next pass sees the new state
        if added or removed:
            self._record_change(version, added=added, removed=removed)
        self.status.passes += 1
        self.status.last_sync_at = time.time()
        # Failures moved rows to `failed` (a new version): the next poll runs another pass.
        self.status.synced_version = None if failed else version
        self.status.last_error = None

    # ---- helpers -------------------------------------------------------------------------------

    def _record_change(self, version: int | None, *, added: list[str], removed: list[str]) -> None:
        """Log and audit what this replica changed in its engine (`version` None: a preload)."""
        log.info("pool changed (version %s): added %s, removed %s", version, added, removed)
        change = {"replica": self.replica, "version": version, "added": added, "removed": removed}
        self.status.changes = [*self.status.changes[-9:], change]
        try:
            with self._session_factory() as session:
                crud.record_event(session, actor=ACTOR, action="pool.sync", detail=change)
        except Exception:  # the audit row is informative; the pool change itself happened
            log.exception("could not record the pool.sync audit event")

    def _unpin(self, ids: Iterable[str]) -> None:
        for drafter_id in ids:
            count = self._pinned.get(drafter_id, 0) - 1
            if count > 0:
                self._pinned[drafter_id] = count
            else:
                self._pinned.pop(drafter_id, None)

    def _record_error(self, error: str) -> None:
        if error != self.status.last_error:  # log a lasting failure once, not every second
            log.warning("pool sync failed (retrying every %.1f s): %s", self.interval_s, error)
        self.status.last_error = error
