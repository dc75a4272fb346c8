"""The gateway's handle on the drafter registry database: migrate on start, ping for /ready.

Opening never raises: a registry that cannot be migrated or reached leaves the server up
(generation does not need it) and `/ready` says why it is not ready.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)


class RegistryLink:
    def __init__(self, url: str) -> None:
        self.url = url
        self.engine: Any = None  # sqlalchemy.Engine once open
        self.error: str | None = "not opened yet"

    def open(self, *, quiet: bool = False) -> None:
        """Run `alembic upgrade head`, then build the engine (blocking: call in a thread).
        `quiet`: a retry logs one line, not the traceback again."""
        try:
            from drafter_registry import db

            db.upgrade(self.url)
            self.engine = db.make_engine(self.url)
            self.error = None
        except Exception as exc:
            self.error = f"{type(exc).__name__}: {exc}"
            if quiet:
                log.warning("registry still unavailable: %s", self.error)
            else:
                log.exception("registry unavailable at start")

    def check(self) -> tuple[bool, str]:
        """(reachable, detail); blocking, never raises."""
        if self.engine is None:
            return False, self.error or "not opened"
        from drafter_registry import db

        if db.ping(self.engine):
            return True, "ok"
        return False, "the database did not answer"

    def close(self) -> None:
        if self.engine is not None:
            self.engine.dispose()
            self.engine = None
