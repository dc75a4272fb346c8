"""Seed pools: a JSON file listing the drafters of one target, imported into the registry.

A seed pool is not a pool file (`pool.json`, `--pool`, `core/pool_file.py`), on purpose: a pool
file is what the engine serves at start with nothing fetched (local drafters, a target directory
or provisioned model, the router and sampling defaults of the served target), while a seed pool
lists registry rows to create, Hub drafters included, which serve only once the fetcher has
downloaded and validated them; its `target` labels those rows. `load_seed_pool` names the pool
file dialect when handed one, and the pool-file loader names this one.

Format (HedgeSpec style; `_comment` keys are allowed anywhere and ignored):

    {"target": "meta-llama/Llama-3.1-8B-Instruct",
     "drafters": [
        {"id": "generalist", "name": "EAGLE-3 generalist", "domain": "general", "source": "hf",
         "repo_id": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "revision": "main"},
        {"id": "python", "name": "Python", "domain": "python", "source": "local",
         "path": "demo/pool/drafters/python"}]}

An entry may instead name a folder of a multi-drafter Hub repository; it stands for every
drafter discovery finds there (`drafter_registry.discovery`: ids from the folder names, domains
mapped from them, nothing guessed):

        {"_comment": "the paper's seven domain drafters",
         "discover": {"repo_id": "aladinggit/hedgespec_eagle_drafters", "prefix": "lm318/model/",
                      "revision": "main", "name_prefix": "HedgeSpec Llama-3.1-8B"}}

A model-free drafter (no weights) is an entry with a `kind` and its `params`; it is registered
`ready` at once:

        {"id": "lookup", "name": "Prompt lookup", "kind": "ngram", "params": {"max_n": 4}}

The registry cannot tell which kinds and parameters the engine knows: the importer passes
`check_params` (the gateway's check against `core.speculation.model_free.kinds`), which returns the
full parameters (defaults filled in, as stored) or raises `ValueError`; such an entry is reported as
`invalid` and the rest of the file is imported.

`discover` takes every field of `schemas.DiscoverSpec` (`id_prefix`, `domains`, `tags`, ...).
Importing such an entry lists the repository (hub access as for downloads: `hub=` settings,
`HF_ENDPOINT`, token, `HF_HUB_OFFLINE`); when that fails, the entry is reported as `error` and
the rest of the file is imported anyway; importing again later adds what was missed.

Import is idempotent: a drafter whose id exists with the same source (kind and parameters for a
model-free one) is left as it is (status, progress and operator edits included); one whose id
exists with a different source is reported as a conflict and not touched, so a seed never
overrides an operator's change.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    model_validator,
)
from sqlalchemy.orm import Session

from drafter_registry import crud
from drafter_registry.discovery import discover_and_register
from drafter_registry.errors import DrafterConflict, InvalidDrafter, RegistryError
from drafter_registry.fetcher import FetchSettings
from drafter_registry.models import Drafter
from drafter_registry.schemas import DiscoverSpec, DrafterCreate, DrafterId

ParamsCheck = Callable[[str, Mapping[str, Any]], dict[str, Any]]
"""`(kind, params) -> full params` of a model-free drafter; raises `ValueError` naming the
problem (unknown kind or parameter, a bad value). The gateway binds it to the engine's kinds."""


class SeedDrafter(DrafterCreate):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    id: DrafterId  # required in a seed file, so re-imports find the same row
    comment: str | None = Field(default=None, alias="_comment")


class SeedDiscover(BaseModel):
    """Every drafter found under a folder of a Hub repository (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    discover: DiscoverSpec
    comment: str | list[str] | None = Field(default=None, alias="_comment")

    @property
    def label(self) -> str:
        prefix = self.discover.prefix
        return f"discover:{self.discover.repo_id}" + (f"/{prefix}" if prefix else "")


def _entry_kind(value: Any) -> str:
    if isinstance(value, dict):
        return "discover" if "discover" in value else "drafter"
    return "discover" if isinstance(value, SeedDiscover) else "drafter"


SeedEntry = Annotated[
    Annotated[SeedDrafter, Tag("drafter")] | Annotated[SeedDiscover, Tag("discover")],
    Discriminator(_entry_kind),
]


class SeedPool(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    target: str = Field(min_length=1)
    drafters: list[SeedEntry]
    comment: str | list[str] | None = Field(default=None, alias="_comment")

    @model_validator(mode="after")
    def _unique_ids(self) -> SeedPool:
        ids = [d.id for d in self.drafters if isinstance(d, SeedDrafter)]
        duplicates = sorted({i for i in ids if ids.count(i) > 1})
        if duplicates:
            raise ValueError(f"duplicate drafter ids {duplicates}")
        return self


@dataclass(frozen=True)
class SeedResult:
    drafter_id: str
    action: Literal["created", "unchanged", "conflict", "skipped", "error", "invalid"]
    detail: str | None = None
    subfolder: str | None = None  # discovered drafters and skipped folders


def load_seed_pool(path: str | Path) -> SeedPool:
    """Parse and validate a seed file; raise `InvalidDrafter` naming the file and the problem."""
    file = Path(path)
    try:
        raw = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise InvalidDrafter(f"cannot read seed pool {file}: {exc}") from None
    if _is_pool_file(raw):
        raise InvalidDrafter(
            f"invalid seed pool {file}: it is a pool file (a provisioned target, a router, "
            "sampling defaults or a model name), which the gateway serves with --pool and "
            "registers itself; a seed pool lists drafters for the registry to fetch")
    try:
        return SeedPool.model_validate(raw)
    except ValidationError as exc:
        raise InvalidDrafter(f"invalid seed pool {file}: {exc}") from None


# Keys only a pool file (core/pool_file.py) has.
POOL_FILE_KEYS = ("model_name", "router", "generation_config")


def _is_pool_file(raw: Any) -> bool:
    return isinstance(raw, dict) and (isinstance(raw.get("target"), dict)
                                      or any(key in raw for key in POOL_FILE_KEYS))


def import_seed_pool(
    session: Session, pool: SeedPool, *, actor: str, base_dir: str | Path,
    hub: FetchSettings | None = None, check_params: ParamsCheck | None = None,
) -> list[SeedResult]:
    """Register every drafter of `pool` that is not registered yet (as `pending`; model-free
    ones as `ready`).

    Relative local paths are resolved against `base_dir` (the gateway passes its working
    directory: the repository root for `make serve` and in the Docker image). `discover`
    entries list their repository through `hub` (cache, endpoint, token of the downloader);
    without it they are reported as `error`. Model-free entries are checked with
    `check_params` (without it, their parameters are stored as written).
    """
    results: list[SeedResult] = []
    for entry in pool.drafters:
        if isinstance(entry, SeedDiscover):
            results += _discover(session, entry, pool.target, actor=actor, hub=hub)
            continue
        spec = _resolved(entry, Path(base_dir), pool.target)
        if spec.model_free and check_params is not None:
            try:
                spec = spec.model_copy(update={"params": check_params(spec.kind,
                                                                        spec.params or {})})
            except ValueError as exc:
                results.append(SeedResult(entry.id, "invalid", str(exc)))
                continue
        existing = crud.get_drafter(session, drafter_id=entry.id)
        if existing is not None:
            results.append(_compare(existing, spec))
            continue
        try:
            crud.create_drafter_from_spec(session, spec=spec, actor=actor)
            results.append(SeedResult(entry.id, "created"))
        except DrafterConflict as exc:
            results.append(SeedResult(entry.id, "conflict", str(exc)))
    crud.record_event(
        session, actor=actor, action="pool.seed", target=None,
        detail={"target": pool.target, "results": {r.drafter_id: r.action for r in results}},
    )
    return results


def _discover(session: Session, entry: SeedDiscover, target: str, *, actor: str,
              hub: FetchSettings | None) -> list[SeedResult]:
    if hub is None:
        return [SeedResult(entry.label, "error", "no hub settings given: cannot list the "
                           "repository")]
    spec = entry.discover
    if spec.target_model is None:
        spec = spec.model_copy(update={"target_model": target})
    try:
        report = discover_and_register(session, spec, actor=actor, cache_dir=hub.cache_dir,
                                       token=hub.token, endpoint=hub.endpoint)
    except RegistryError as exc:
        return [SeedResult(entry.label, "error", str(exc))]
    return [
        SeedResult(r.drafter_id or r.subfolder, r.action,  # type: ignore[arg-type]
                   r.detail, subfolder=r.subfolder)
        for r in report.results
    ]


def _resolved(entry: SeedDrafter, base_dir: Path, target: str) -> DrafterCreate:
    fields = entry.model_dump(exclude={"comment"})
    if entry.path is not None and not Path(entry.path).is_absolute():
        fields["path"] = str((base_dir / entry.path).resolve())
    fields["target_model"] = entry.target_model or target
    return DrafterCreate.model_validate(fields)


def _compare(existing: Drafter, spec: DrafterCreate) -> SeedResult:
    wanted = (spec.kind, spec.params or None, spec.source, spec.repo_id, spec.revision,
              spec.subfolder, spec.path if spec.source == "local" else None)
    found = (existing.kind, existing.params or None, existing.source, existing.repo_id,
             existing.revision, existing.subfolder,
             existing.local_path if existing.source == "local" else None)
    if wanted == found:
        return SeedResult(existing.id, "unchanged")
    return SeedResult(existing.id, "conflict", f"registered as {found}, seed says {wanted}")
