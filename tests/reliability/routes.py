"""The application's route table, flattened: what the fuzz and security suites enumerate, so a
route added later is fuzzed and checked for its key without anyone editing those suites."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from fastapi import FastAPI

from gateway.app import create_app
from gateway.config import Settings

PARAM = re.compile(r"\{([^}:]+)(?::[^}]*)?\}")


@dataclass(frozen=True)
class RouteInfo:
    path: str  # as declared, e.g. /admin/api/drafters/{drafter_id}
    methods: frozenset[str]

    @property
    def params(self) -> list[str]:
        return PARAM.findall(self.path)

    def url(self, **values: str) -> str:
        """The path with its parameters filled in (values must already be URL-safe)."""
        return PARAM.sub(lambda m: values.get(m.group(1), "x"), self.path)


def app_routes(app: FastAPI) -> list[RouteInfo]:
    """Every HTTP route, including those of included routers (FastAPI >= 0.13x wraps them in a
    lazy `_IncludedRouter`; `iter_route_contexts` flattens it) and `include_in_schema=False`
    ones. Anything that is not a plain route (a mount, a websocket) raises, so it cannot be
    skipped silently."""
    try:
        from fastapi.routing import iter_route_contexts
    except ImportError:  # older FastAPI: app.routes is already flat
        routes = [(getattr(r, "path", None), getattr(r, "methods", None), r) for r in app.routes]
    else:
        routes = [(rc.path, rc.methods, rc.original_route)
                  for rc in iter_route_contexts(app.routes)]
    out = []
    for path, methods, route in routes:
        if path is None or not methods:
            raise AssertionError(f"route kind not covered by the reliability suites: {route!r}")
        out.append(RouteInfo(str(path), frozenset(methods)))
    return out


def build_app(tmp: Path, **overrides: object) -> FastAPI:
    """The real app factory with keys configured; its lifespan is not run (no engine load)."""
    settings = Settings(
        pool=tmp / "missing-pool.json", database_url=f"sqlite:///{tmp / 'routes.db'}",
        warmup=False, **overrides,  # type: ignore[arg-type]
    )  # fmt: skip
    return create_app(settings)
