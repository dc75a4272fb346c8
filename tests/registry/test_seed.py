"""Seed pools: the shipped files are valid, import is idempotent and never overrides an operator."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy.orm import Session

from drafter_registry import crud
from drafter_registry.db import pool_version
from drafter_registry.errors import InvalidDrafter
from drafter_registry.seed import SeedDiscover, SeedDrafter, import_seed_pool, load_seed_pool

POOLS = Path(__file__).resolve().parents[2] / "pools"
DOMAINS = ["generalist", "python", "math", "biology", "chemistry", "medical", "news", "sql"]


@pytest.fixture
def local_seed(tmp_path: Path) -> Path:
    """A seed pool of local drafters (paths relative to the importer's `base_dir`)."""
    path = tmp_path / "local-seed.json"
    path.write_text(json.dumps({"target": "HuggingFaceTB/SmolLM2-135M-Instruct", "drafters": [
        {"id": d, "name": f"Demo {d.capitalize()}", "domain": d, "source": "local",
         "path": f"demo/pool/drafters/{d}"} for d in DOMAINS]}))
    return path


def test_the_shipped_seed_pools_are_the_papers() -> None:
    """`pools/` holds seed pools only; the demo pool is a pool file (demo/pool/pool.json),
    which the gateway imports into the registry as it serves it."""
    assert sorted(p.name for p in POOLS.glob("*.json")) == [
        "llama31_8b_hedgespec.json", "qwen3_32b_hedgespec.json", "qwen3_8b_hedgespec.json"]


def test_the_llama_pool_discovers_the_published_drafters() -> None:
    pool = load_seed_pool(POOLS / "llama31_8b_hedgespec.json")
    assert pool.target == "meta-llama/Llama-3.1-8B-Instruct"
    generalist, experts = pool.drafters
    assert isinstance(generalist, SeedDrafter) and isinstance(experts, SeedDiscover)
    assert (generalist.repo_id, generalist.subfolder) == ("yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
                                                          None)
    # No guessed folder names: the domain drafters are whatever lm318/model/ holds.
    assert (experts.discover.repo_id, experts.discover.prefix) == (
        "aladinggit/hedgespec_eagle_drafters", "lm318/model")


def test_import_is_idempotent(session: Session, tmp_path: Path, local_seed: Path) -> None:
    pool = load_seed_pool(local_seed)
    results = import_seed_pool(session, pool, actor="cli", base_dir=tmp_path)
    assert [(r.drafter_id, r.action) for r in results] == [(i, "created") for i in DOMAINS]
    python = crud.get_drafter(session, drafter_id="python")
    assert python is not None and python.status == "pending"
    assert python.local_path == str(tmp_path / "demo/pool/drafters/python")
    assert python.target_model == "HuggingFaceTB/SmolLM2-135M-Instruct"
    version = pool_version(session)
    again = import_seed_pool(session, pool, actor="cli", base_dir=tmp_path)
    assert {r.action for r in again} == {"unchanged"} and pool_version(session) == version
    assert [e.action for e in crud.list_events(session, limit=2)] == ["pool.seed", "pool.seed"]


def test_import_reports_conflicts_and_leaves_them_alone(session: Session, tmp_path: Path,
                                                        local_seed: Path) -> None:
    crud.create_drafter(session, name="My python", drafter_id="python", source="hf",
                        repo_id="me/mine", actor="admin")
    crud.create_drafter(session, name="Demo Math", source="hf", repo_id="me/math", actor="admin")
    results = {r.drafter_id: r for r in import_seed_pool(
        session, load_seed_pool(local_seed), actor="cli", base_dir=tmp_path)}
    assert results["python"].action == "conflict" and "me/mine" in str(results["python"].detail)
    assert results["math"].action == "conflict"  # name taken by another id
    assert results["sql"].action == "created"
    mine = crud.get_drafter(session, drafter_id="python")
    assert mine is not None and mine.repo_id == "me/mine"


@pytest.mark.parametrize(("content", "message"), [
    ("{", "cannot read seed pool"),
    ({"target": "t", "drafters": [{"id": "a", "name": "A", "source": "hf", "repo_id": "o/r"}] * 2},
     "duplicate"),
    ({"target": "t", "drafters": [{"id": "a", "name": "A", "source": "hf", "repo_id": "o/r",
                                   "subfolder": "../x"}]}, "invalid subfolder"),
    ({"target": "t", "drafters": [{"name": "A", "source": "hf", "repo_id": "o/r"}]}, "id"),
    ({"target": "t", "drafters": [], "unknown": 1}, "unknown"),
    ({"target": "t", "drafters": [{"discover": {"repo_id": "o/r", "prefix": "../x"}}]},
     "invalid subfolder"),
    ({"target": "t", "drafters": [{"discover": {"repo_id": "o/r", "subfolder": "x"}}]},
     "subfolder"),
    # the demo pool's pool file, handed over as a seed pool: named as the other dialect
    ({"target": {"provision": "smollm2-135m-instruct"}, "drafters": []}, "it is a pool file"),
    ({"target": "target", "router": "router.npz", "drafters": []}, "it is a pool file"),
])
def test_invalid_seed_files_name_the_problem(tmp_path: Path, content: object, message: str) -> None:
    path = tmp_path / "pool.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    with pytest.raises(InvalidDrafter, match=message) as info:
        load_seed_pool(path)
    assert str(path) in str(info.value)


def test_model_free_entries_are_checked_stored_whole_and_idempotent(session: Session,
                                                                    tmp_path: Path) -> None:
    """The registry cannot check a kind's parameters: the importer's `check_params` does (the
    gateway binds the engine's), and what it returns (defaults filled in) is stored."""

    def check(kind: str, params: object) -> dict[str, object]:
        if kind != "ngram" or set(dict(params)) - {"max_n"}:  # type: ignore[call-overload]
            raise ValueError(f"refused {kind} {params}")
        return {"max_n": 3, "max_depth": 8, **dict(params)}  # type: ignore[call-overload]

    path = tmp_path / "pool.json"
    path.write_text(json.dumps({"target": "t", "drafters": [
        {"id": "lookup", "kind": "ngram", "params": {"max_n": 4}},
        {"id": "odd", "kind": "ngram", "params": {"mystery": 1}},
        {"id": "local", "name": "Local", "source": "local", "path": "d/local"}]}))
    pool = load_seed_pool(path)
    results = import_seed_pool(session, pool, actor="seed", base_dir=tmp_path, check_params=check)
    assert [(r.drafter_id, r.action) for r in results] == [
        ("lookup", "created"), ("odd", "invalid"), ("local", "created")]
    assert "refused ngram" in str(results[1].detail)
    lookup = crud.get_drafter(session, drafter_id="lookup")
    assert lookup is not None
    assert (lookup.kind, lookup.params, lookup.status, lookup.target_model) == (
        "ngram", {"max_n": 4, "max_depth": 8}, "ready", "t")
    again = import_seed_pool(session, pool, actor="seed", base_dir=tmp_path, check_params=check)
    assert [r.action for r in again] == ["unchanged", "invalid", "unchanged"]
    # The same id with other parameters is a conflict, never an override.
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"target": "t", "drafters": [
        {"id": "lookup", "kind": "ngram", "params": {"max_n": 2}}]}))
    [result] = import_seed_pool(session, load_seed_pool(other), actor="seed", base_dir=tmp_path,
                                check_params=check)
    assert result.action == "conflict"
    row = crud.get_drafter(session, drafter_id="lookup")
    assert row is not None and row.params == {"max_n": 4, "max_depth": 8}
