"""The engine's pool as the pool sync (gateway/pool/sync.py) edits it from its own thread.

`SpecEngine` is not thread-safe, so every edit runs on the engine worker between two rounds
(`EngineRunner.call`), against `RuntimePool`: the pool an engine declares it can change
(`Engine.runtime_pool()`; None when its pool is fixed at load, as in an engine double). Loading
weights is the exception: the loader is fetched on the worker and called off it, since it only
reads the target (embedding, dtype, device), so a large drafter never stalls a round.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from core.api import ModelFreeDrafter
from gateway.runner import Engine, EngineRunner, RuntimePool

if TYPE_CHECKING:  # the drafter's module imports torch: loaded with the engine only
    from core.api import Eagle3Drafter

log = logging.getLogger(__name__)
T = TypeVar("T")

ENGINE_CALL_TIMEOUT_S = 300.0  # a pool swap waits for the round in progress, never longer


class FixedPoolError(RuntimeError):
    """The engine's pool cannot change while it serves (`Engine.runtime_pool()` is None)."""


class EnginePool:
    """Typed pool edits of the engine `runner` holds, each one call on the worker thread."""

    def __init__(self, runner: EngineRunner) -> None:
        self._runner = runner
        self._editable: bool | None = None

    def editable(self) -> bool:
        """Whether the engine declares a pool it can change (asked once, when loaded)."""
        if self._editable is None:
            self._editable = self._on_worker(lambda engine: engine.runtime_pool() is not None)
            if not self._editable:
                log.warning("the engine cannot change its pool at run time: pool sync is off")
        return self._editable

    def drafter_ids(self) -> list[str]:
        return self._edit(lambda pool: pool.drafter_ids())

    def loader(self) -> Callable[[Path], Eagle3Drafter]:
        """The engine's drafter loader, to call on this thread (see the module docstring)."""
        return self._edit(lambda pool: pool.load_drafter)

    def add_loaded(self, drafter_ids: Iterable[str], drafter: Eagle3Drafter) -> None:
        """`drafter` under every id of `drafter_ids`, all between the same two rounds."""
        ids = list(drafter_ids)

        def add(pool: RuntimePool) -> None:
            for drafter_id in ids:
                pool.add_loaded_drafter(drafter_id, drafter)

        self._edit(add)

    def add_model_free(self, drafter_id: str, member: ModelFreeDrafter) -> None:
        self._edit(lambda pool: pool.add_model_free(drafter_id, member))

    def remove(self, drafter_ids: Iterable[str]) -> None:
        """Every id of `drafter_ids` out of the pool, between the same two rounds."""
        ids = list(drafter_ids)

        def remove(pool: RuntimePool) -> None:
            for drafter_id in ids:
                pool.remove_drafter(drafter_id)

        self._edit(remove)

    def _edit(self, edit: Callable[[RuntimePool], T]) -> T:
        return self._on_worker(lambda engine: edit(runtime_pool(engine)))

    def _on_worker(self, fn: Callable[[Engine], T]) -> T:
        return self._runner.call(fn).result(timeout=ENGINE_CALL_TIMEOUT_S)


def runtime_pool(engine: Engine) -> RuntimePool:
    """`engine`'s pool, or `FixedPoolError` when it declares none."""
    pool = engine.runtime_pool()
    if pool is None:
        raise FixedPoolError("the engine's pool is fixed at load")
    return pool
