"""Seed pools: a JSON file listing the drafters of one target, imported into the registry.

Format (HedgeSpec style; `_comment` keys are allowed anywhere and ignored):

    {"target": "meta-llama/Llama-3.1-8B-Instruct",
     "drafters": [
        {"id": "generalist", "name": "EAGLE-3 generalist", "domain": "general", "source": "hf",
         "repo_id": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "revision": "main"},
        {"id": "python", "name": "Python", "domain": "python", "source": "local",
         "path": "demo/pool/drafters/python"}]}

Import is idempotent: a drafter whose id exists with the same source is left as it is (status,
progress and operator edits included); one whose id exists with a different source is reported
as a conflict and not touched, so a seed never overrides an operator's change.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from sqlalchemy.orm import Session

from drafter_registry import crud
from drafter_registry.errors import DrafterConflict, InvalidDrafter
from drafter_registry.models import Drafter
from drafter_registry.schemas import DrafterCreate, DrafterId


class SeedDrafter(DrafterCreate):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    id: DrafterId  # required in a seed file, so re-imports find the same row
    comment: str | None = Field(default=None, alias="_comment")


class SeedPool(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    target: str = Field(min_length=1)
    drafters: list[SeedDrafter]
    comment: str | list[str] | None = Field(default=None, alias="_comment")

    @model_validator(mode="after")
    def _unique_ids(self) -> SeedPool:
        ids = [d.id for d in self.drafters]
        duplicates = sorted({i for i in ids if ids.count(i) > 1})
        if duplicates:
            raise ValueError(f"duplicate drafter ids {duplicates}")
        return self


@dataclass(frozen=True)
class SeedResult:
    drafter_id: str
    action: Literal["created", "unchanged", "conflict"]
    detail: str | None = None


def load_seed_pool(path: str | Path) -> SeedPool:
    """Parse and validate a seed file; raise `InvalidDrafter` naming the file and the problem."""
    file = Path(path)
    try:
        return SeedPool.model_validate(json.loads(file.read_text(encoding="utf-8")))
    except (OSError, json.JSONDecodeError) as exc:
        raise InvalidDrafter(f"cannot read seed pool {file}: {exc}") from None
    except ValidationError as exc:
        raise InvalidDrafter(f"invalid seed pool {file}: {exc}") from None


def import_seed_pool(
    session: Session, pool: SeedPool, *, actor: str, base_dir: str | Path
) -> list[SeedResult]:
    """Register every drafter of `pool` that is not registered yet (as `pending`).

    Relative local paths are resolved against `base_dir` (the gateway passes its working
    directory: the repository root for `make serve` and in the Docker image).
    """
    results = []
    for entry in pool.drafters:
        spec = _resolved(entry, Path(base_dir), pool.target)
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


def _resolved(entry: SeedDrafter, base_dir: Path, target: str) -> DrafterCreate:
    fields = entry.model_dump(exclude={"comment"})
    if entry.path is not None and not Path(entry.path).is_absolute():
        fields["path"] = str((base_dir / entry.path).resolve())
    fields["target_model"] = entry.target_model or target
    return DrafterCreate.model_validate(fields)


def _compare(existing: Drafter, spec: DrafterCreate) -> SeedResult:
    wanted = (spec.source, spec.repo_id, spec.revision, spec.subfolder,
              spec.path if spec.source == "local" else None)
    found = (existing.source, existing.repo_id, existing.revision, existing.subfolder,
             existing.local_path if existing.source == "local" else None)
    if wanted == found:
        return SeedResult(existing.id, "unchanged")
    return SeedResult(existing.id, "conflict", f"registered as {found}, seed says {wanted}")
