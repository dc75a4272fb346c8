"""Pydantic DTOs of the admin API (template naming: `XCreate`, `XUpdate`, `XPublic`, `XsPublic`).

Input DTOs validate with the same functions as `crud`, so a request that passes here is accepted
there; `crud` still validates on its own for callers that bypass the API (CLI, seed pools).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    computed_field,
    field_validator,
    model_validator,
)

from drafter_registry.identifiers import (
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

DrafterKind = Annotated[str, AfterValidator(validate_kind)]
DrafterId = Annotated[str, AfterValidator(validate_drafter_id)]
RepoId = Annotated[str, AfterValidator(validate_repo_id)]
Revision = Annotated[str, AfterValidator(validate_revision)]
Subfolder = Annotated[str | None, AfterValidator(validate_subfolder)]
LocalPath = Annotated[str, AfterValidator(validate_local_path)]
DomainTag = Annotated[str, AfterValidator(validate_domain)]


class DrafterCreate(BaseModel):
    """A drafter to register: an EAGLE-3 drafter from a Hugging Face repo (+ revision,
    sub-folder) or a local directory, or a model-free drafter (`kind` other than `eagle3`,
    with `params`; no source, no name needed: it defaults to the id, else the kind).

    Only the form of `kind` and `params` is checked here; whether the engine knows the kind and
    its parameters is the gateway's check (the registry does not import the engine)."""

    model_config = ConfigDict(extra="forbid")

    id: DrafterId | None = Field(
        default=None, description="Slug used in `fixed:<id>`; derived from the name if absent"
    )
    name: str | None = Field(default=None, min_length=1, max_length=128)
    kind: DrafterKind = Field(default="eagle3",
                              description="eagle3, or a model-free kind (ngram, suffix, grammar)")
    params: dict[str, Any] | None = Field(
        default=None, description="a model-free drafter's parameters, e.g. {\"max_n\": 4}")
    source: Literal["hf", "local", "none"] | None = None
    repo_id: RepoId | None = None
    revision: Revision | None = Field(default=None,
                                      description="Branch, tag or commit; hf default main")
    subfolder: Subfolder = None
    path: LocalPath | None = None
    domain: DomainTag | None = None
    tags: list[DomainTag] = Field(default_factory=list)
    target_model: str | None = Field(default=None, max_length=512)

    @field_validator("params")
    @classmethod
    def _params(cls, value: dict[str, Any] | None, info: ValidationInfo) -> dict[str, Any] | None:
        return validate_params(str(info.data.get("kind", "eagle3")), value)

    @model_validator(mode="after")
    def _source_fields(self) -> DrafterCreate:
        if self.model_free:
            self.source = self.source or "none"
            self.name = self.name or self.id or self.kind
        elif self.source is None:
            raise ValueError("source is required for an eagle3 drafter: 'hf' or 'local'")
        elif self.name is None:
            raise ValueError("name is required for an eagle3 drafter")
        if self.source == "hf" and self.revision is None:
            self.revision = "main"
        validate_source_fields(
            source=self.source,
            repo_id=self.repo_id,
            revision=self.revision,
            subfolder=self.subfolder,
            path=self.path,
            kind=self.kind,
        )
        return self

    @property
    def model_free(self) -> bool:
        return self.kind != "eagle3"


class DiscoverSpec(BaseModel):
    """Register every drafter found under a folder of a Hub repository (`discovery.py`).

    `prefix` is a folder path inside the repo (`lm318/model/`; empty: the whole repo). Every
    folder below it that holds an EAGLE-3 `config.json` and weights becomes one drafter: id
    `id_prefix` + the folder path relative to the prefix, slugified (`MedQA` -> `medqa`), domain
    mapped from the folder name (`MedQA` -> `medical`; `domains` overrides it per folder name),
    the folder name kept as a tag, name `name_prefix` + folder (default: repo name/folder path).
    """

    model_config = ConfigDict(extra="forbid")

    repo_id: RepoId
    prefix: Subfolder = None
    revision: Revision = "main"
    id_prefix: str = Field(default="", max_length=32, pattern=r"^([a-z0-9][a-z0-9._-]*)?$")
    name_prefix: str | None = Field(default=None, min_length=1, max_length=64)
    domains: dict[str, DomainTag] = Field(
        default_factory=dict, description="folder name (relative to the prefix) -> domain")
    tags: list[DomainTag] = Field(default_factory=list)
    target_model: str | None = Field(default=None, max_length=512)


class DrafterUpdate(BaseModel):
    """Descriptive fields an operator may edit; send only what changes (`exclude_unset`)."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(default=None, min_length=1, max_length=128)
    domain: DomainTag | None = None
    tags: list[DomainTag] | None = None
    target_model: str | None = Field(default=None, max_length=512)


class DrafterPublic(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: str
    name: str
    kind: str
    params: dict[str, Any] | None
    source: str
    repo_id: str | None
    revision: str | None
    subfolder: str | None
    commit_sha: str | None
    local_path: str | None
    target_model: str | None
    domain: str | None
    tags: list[str]
    status: str
    error: str | None
    bytes_done: int
    bytes_total: int | None
    inspection: dict[str, Any] | None
    created_at: datetime
    updated_at: datetime
    ready_at: datetime | None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def progress(self) -> float | None:
        """Downloaded fraction in [0, 1]; `None` while the total size is unknown."""
        if not self.bytes_total:
            return 1.0 if self.status == "ready" else None
        return min(1.0, self.bytes_done / self.bytes_total)


class DraftersPublic(BaseModel):
    data: list[DrafterPublic]
    count: int
    pool_version: int


class AuditEventPublic(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    at: datetime
    actor: str
    action: str
    target: str | None
    detail: dict[str, Any] | None


class AuditEventsPublic(BaseModel):
    data: list[AuditEventPublic]
    count: int
