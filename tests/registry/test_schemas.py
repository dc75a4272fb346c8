"""Admin DTOs: input rules mirror crud, output carries a progress fraction."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from sqlalchemy.orm import Session

from drafter_registry import crud
from drafter_registry.schemas import DrafterCreate, DrafterPublic, DrafterUpdate


def test_hf_defaults_to_main_and_normalises_the_subfolder() -> None:
    spec = DrafterCreate(name="x", source="hf", repo_id="a/b", subfolder="llama/python/")
    assert (spec.revision, spec.subfolder, spec.path) == ("main", "llama/python", None)


@pytest.mark.parametrize("fields", [
    {"source": "hf"},
    {"source": "local"},
    {"source": "hf", "repo_id": "a/b", "path": "/x"},
    {"source": "local", "path": "/x", "revision": "main"},
    {"source": "hf", "repo_id": "a/b", "subfolder": "a/../../b"},
    {"source": "hf", "repo_id": "a/b", "revision": "/abs"},
    {"source": "hf", "repo_id": "a/b", "id": "Not Valid"},
    {"source": "hf", "repo_id": "a/b", "trust_remote_code": True},
])
def test_invalid_creates_are_rejected(fields: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        DrafterCreate(name="x", **fields)  # type: ignore[arg-type]


def test_update_only_carries_what_was_sent() -> None:
    assert DrafterUpdate(domain="Math").model_dump(exclude_unset=True) == {"domain": "math"}
    with pytest.raises(ValidationError):
        DrafterUpdate(source="local")  # type: ignore[call-arg]


def test_public_view_of_a_row(session: Session) -> None:
    spec = DrafterCreate(name="Py", source="hf", repo_id="a/b")
    row = crud.create_drafter_from_spec(session, spec=spec, actor="admin")
    public = DrafterPublic.model_validate(row)
    assert (public.id, public.status, public.progress) == ("py", "pending", None)
    crud.start_download(session, drafter_id=row.id, actor="system")
    crud.set_progress(session, drafter_id=row.id, bytes_done=25, bytes_total=100)
    session.refresh(row)
    assert DrafterPublic.model_validate(row).progress == 0.25
    assert DrafterPublic.model_validate(row).model_dump(mode="json")["created_at"].endswith("Z")


def test_a_model_free_create_needs_no_source_or_name() -> None:
    spec = DrafterCreate(id="lookup", kind="ngram", params={"max_n": 4})
    assert (spec.name, spec.source, spec.params, spec.model_free) == (
        "lookup", "none", {"max_n": 4}, True)
    assert DrafterCreate(kind="ngram").name == "ngram"  # no id either: the kind names it
    assert DrafterCreate(name="x", source="hf", repo_id="a/b").kind == "eagle3"


@pytest.mark.parametrize(("fields", "loc"), [
    ({"kind": "Bad"}, ("kind",)),
    ({"kind": "ngram", "params": {"max_n": [4]}}, ("params",)),
    ({"name": "x", "source": "hf", "repo_id": "a/b", "params": {"max_n": 4}}, ("params",)),
    ({"kind": "ngram", "source": "hf", "repo_id": "a/b"}, ()),
    ({"kind": "ngram", "path": "/x"}, ()),
    ({"name": "x"}, ()),  # eagle3 without a source
])
def test_invalid_model_free_creates_name_the_field(fields: dict[str, object],
                                                   loc: tuple[str, ...]) -> None:
    with pytest.raises(ValidationError) as info:
        DrafterCreate(**fields)  # type: ignore[arg-type]
    assert info.value.errors()[0]["loc"] == loc


def test_public_view_of_a_model_free_row(session: Session) -> None:
    row = crud.create_drafter_from_spec(
        session, spec=DrafterCreate(id="lookup", kind="ngram", params={"max_n": 4}), actor="admin")
    public = DrafterPublic.model_validate(row).model_dump(mode="json")
    assert {k: public[k] for k in ("id", "kind", "params", "source", "status", "progress")} == {
        "id": "lookup", "kind": "ngram", "params": {"max_n": 4}, "source": "none",
        "status": "ready", "progress": 1.0}
