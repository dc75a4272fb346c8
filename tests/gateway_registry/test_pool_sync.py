"""`PoolSync` in process, with the real tiny `SpecEngine` on a real `EngineRunner` and a real
SQLite registry: the plan, add/remove through the worker, a drafter's memory freed only when the
last request using it ends, load failures contained, unmanaged drafters left alone; model-free
rows built from their kind and parameters."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.orm import Session, sessionmaker

from bench.harness.tiny_pool import DRAFTER_IDS
from core.config import EngineConfig, SamplingParams
from core.engine import SpecEngine
from core.speculation.model_free.kinds import make_model_free
from core.speculation.model_free.ngram import NGRAM_DEFAULTS
from drafter_registry import crud
from drafter_registry.db import make_engine, make_session_factory, upgrade
from gateway.pool.registry import ServedDrafter, import_served_pool
from gateway.pool.sync import PoolSync, local_key, plan
from gateway.runner import EngineRunner

pytestmark = pytest.mark.timeout(120)


def test_plan() -> None:
    loaded = {"a": "local:/a", "b": "local:/b", "x": "local:/x", "u": None}
    wanted = {"a": "local:/a", "b": "local:/b2", "c": "hf:o/r@1/"}
    remove, add = plan(loaded, wanted, keep={"x"})
    assert sorted(remove) == ["b", "u"]  # changed weights, and gone from the registry
    assert sorted(add) == ["b", "c"]
    assert plan({"a": "k"}, {"a": "k"}, keep=()) == ([], [])


@pytest.fixture
def factory(tmp_path: Path) -> Iterator[sessionmaker[Session]]:
    url = f"sqlite:///{tmp_path / 'registry.db'}"
    upgrade(url)
    engine = make_engine(url)
    yield make_session_factory(engine)
    engine.dispose()


@pytest.fixture
def runner(pool_file: Path) -> Iterator[EngineRunner]:
    runner = EngineRunner(lambda: SpecEngine.from_pool_file(pool_file, EngineConfig()),
                          max_running=4, max_queue=4, request_timeout_s=60, warmup=False)
    runner.start()
    assert asyncio.run(runner.wait_ready(60)), runner.load_error
    yield runner
    asyncio.run(runner.stop(0))


def served(pool_file: Path) -> list[ServedDrafter]:
    base = pool_file.parent / "drafters"
    return [ServedDrafter(i, (base / i).resolve(), i) for i in DRAFTER_IDS]


def make_sync(runner: EngineRunner, factory: sessionmaker[Session], pool_file: Path,
              **kw: Any) -> PoolSync:
    return PoolSync(runner, factory, resolve=lambda row: Path(row.local_path),
                    initial={d.id: local_key(d.path) for d in served(pool_file)}, **kw)


def register_ready(factory: sessionmaker[Session], drafter_id: str, path: Path) -> None:
    with factory() as s:
        crud.create_drafter(s, drafter_id=drafter_id, name=drafter_id, source="local",
                            path=str(path), actor="test")
        crud.finish_download(s, drafter_id=drafter_id, local_path=str(path), commit_sha=None,
                             actor="test")
        crud.mark_ready(s, drafter_id=drafter_id, inspection=None, actor="test")


def engine_ids(runner: EngineRunner) -> set[str]:
    return set(runner.call(lambda e: e.drafter_ids()).result(30))


def write_drafter(root: Path, name: str, files: dict[str, bytes]) -> Path:
    for key, data in files.items():
        if key.startswith(f"{name}/"):
            (root / key).parent.mkdir(parents=True, exist_ok=True)
            (root / key).write_bytes(data)
    return root / name


def test_the_engine_follows_the_registry(runner: EngineRunner, factory: sessionmaker[Session],
                                         pool_file: Path, hub_files: dict[str, bytes],
                                         tmp_path: Path) -> None:
    assert import_served_pool(factory, served(pool_file), target_model=None) == []
    sync = make_sync(runner, factory, pool_file)
    assert sync.poll() and engine_ids(runner) == set(DRAFTER_IDS)  # nothing to do
    assert sync.status.changes == [] and not sync.poll()  # unchanged version: no pass

    register_ready(factory, "gamma", write_drafter(tmp_path, "gamma", hub_files))
    assert sync.poll()
    assert engine_ids(runner) == {*DRAFTER_IDS, "gamma"}
    assert runner.info is not None and "gamma" in runner.info.drafter_ids  # what HTTP checks
    with factory() as s:
        crud.set_enabled(s, drafter_id="alpha", enabled=False, actor="test")
    sync.poll()
    assert engine_ids(runner) == {"beta", "gamma"}
    with factory() as s:
        crud.delete_drafter(s, drafter_id="gamma", actor="test")
        crud.set_enabled(s, drafter_id="alpha", enabled=True, actor="test")
    sync.poll()
    assert engine_ids(runner) == set(DRAFTER_IDS)
    assert [c["added"] for c in sync.status.changes] == [["gamma"], [], ["alpha"]]
    with factory() as s:
        audit = [e.detail for e in crud.list_events(s) if e.action == "pool.sync"]
    assert len(audit) == 3 and all(d["replica"] == "gateway" for d in audit)


def test_a_removed_drafter_is_freed_when_its_last_request_ends(
    runner: EngineRunner, factory: sessionmaker[Session], pool_file: Path,
    hub_files: dict[str, bytes], tmp_path: Path,
) -> None:
    import_served_pool(factory, served(pool_file), target_model=None)
    sync = make_sync(runner, factory, pool_file)
    register_ready(factory, "gamma", write_drafter(tmp_path, "gamma", hub_files))
    sync.poll()
    ref = weakref.ref(runner.call(lambda e: e.snapshot.drafters["gamma"]).result(30))
    # A long request on gamma, stepped by the worker (its outputs go nowhere).
    params = SamplingParams(max_new_tokens=400, ignore_eos=True)
    runner.call(lambda e: e.add_request("long", [5, 6, 7], params, "fixed:gamma")).result(30)
    with factory() as s:
        crud.delete_drafter(s, drafter_id="gamma", actor="test")
    sync.poll()
    assert "gamma" not in engine_ids(runner)
    assert runner.call(lambda e: e.has_unfinished()).result(30), "the request ended too soon"
    gc.collect()
    assert ref() is not None  # still in use by the request in flight
    runner.call(lambda e: e.abort("long")).result(30)
    gc.collect()
    assert ref() is None  # neither the engine nor the pool sync kept a reference


def test_a_drafter_the_engine_cannot_load_is_marked_failed(
    runner: EngineRunner, factory: sessionmaker[Session], pool_file: Path,
    hub_files: dict[str, bytes], tmp_path: Path,
) -> None:
    import_served_pool(factory, served(pool_file), target_model=None)
    sync = make_sync(runner, factory, pool_file, replica="replica-1")
    # Registered as ready behind the fetcher's back (e.g. by another gateway's bug).
    register_ready(factory, "wide", write_drafter(tmp_path, "wide", hub_files))
    register_ready(factory, "gone", tmp_path / "does-not-exist")
    sync.poll()
    assert engine_ids(runner) == set(DRAFTER_IDS)
    with factory() as s:
        for drafter_id in ("wide", "gone"):
            row = crud.get_drafter(s, drafter_id=drafter_id)
            assert row.status == "failed", drafter_id
            assert row.error.startswith("could not be loaded into the engine on replica-1: ")
        assert "incompatible" in crud.get_drafter(s, drafter_id="wide").error
    sync.poll()  # the failures moved the version: a clean pass follows
    assert sync.status.synced_version is not None and sync.status.last_error is None


def test_unmanaged_and_pinned_drafters_are_left_alone(
    runner: EngineRunner, factory: sessionmaker[Session], pool_file: Path,
    hub_files: dict[str, bytes], tmp_path: Path,
) -> None:
    # "alpha" is served but unknown to the registry (e.g. an id it refuses).
    import_served_pool(factory, served(pool_file)[1:], target_model=None)
    sync = make_sync(runner, factory, pool_file, unmanaged=["alpha"])
    path = write_drafter(tmp_path, "delta", hub_files)
    assert sync.preload({"delta": local_key(path)}, path)  # pinned, not in the registry yet
    sync.poll()
    assert engine_ids(runner) == {*DRAFTER_IDS, "delta"}
    sync.release("delta")  # its fetch ended without `ready`: now it goes
    sync.poll()
    assert engine_ids(runner) == set(DRAFTER_IDS)


def test_served_pool_import_is_idempotent_and_keeps_operator_changes(
    factory: sessionmaker[Session], pool_file: Path
) -> None:
    drafters = served(pool_file)
    hostile = ServedDrafter("<b>x</b>", drafters[0].path, "hostile")
    assert import_served_pool(factory, [*drafters, hostile], target_model="tiny") == ["<b>x</b>"]
    with factory() as s:
        crud.set_enabled(s, drafter_id="alpha", enabled=False, actor="operator")
        count = crud.count_drafters(s)
    assert import_served_pool(factory, drafters, target_model="tiny") == []
    with factory() as s:
        assert crud.count_drafters(s) == count
        alpha = crud.get_drafter(s, drafter_id="alpha")
        assert alpha.status == "disabled" and alpha.target_model == "tiny"
        beta = crud.get_drafter(s, drafter_id="beta")
        assert (beta.status, beta.source, beta.local_path) == (
            "ready", "local", str(drafters[1].path))
        assert beta.inspection["origin"] == "served pool"


def test_model_free_rows_are_built_added_replaced_and_removed(
    runner: EngineRunner, factory: sessionmaker[Session], pool_file: Path
) -> None:
    import_served_pool(factory, served(pool_file), target_model=None)
    sync = make_sync(runner, factory, pool_file)
    with factory() as s:
        crud.create_drafter(s, drafter_id="lookup", name="Lookup", kind="ngram",
                            params={"min_n": 1, "max_n": 4, "max_depth": 6}, actor="test")
    sync.poll()
    assert engine_ids(runner) == {*DRAFTER_IDS, "lookup"}
    kind, params = runner.call(
        lambda e: (e.drafter_kind("lookup"), e.snapshot.members["lookup"].params)).result(30)
    assert (kind, params) == ("ngram", {"min_n": 1, "max_n": 4, "max_depth": 6})
    assert runner.info is not None and runner.info.drafter_kinds["lookup"] == "ngram"
    assert runner.info.drafter_kinds["alpha"] == "eagle3"
    first = runner.call(lambda e: e.snapshot.members["lookup"]).result(30)
    # Same id, other parameters (deleted and registered again): the member is replaced.
    with factory() as s:
        crud.delete_drafter(s, drafter_id="lookup", actor="test")
        crud.create_drafter(s, drafter_id="lookup", name="Lookup", kind="ngram",
                            params={"min_n": 1, "max_n": 2, "max_depth": 6}, actor="test")
    sync.poll()
    second = runner.call(lambda e: e.snapshot.members["lookup"]).result(30)
    assert second is not first and second.params["max_n"] == 2
    with factory() as s:
        crud.set_enabled(s, drafter_id="lookup", enabled=False, actor="test")
    sync.poll()
    assert engine_ids(runner) == set(DRAFTER_IDS)
    # A kind this replica's engine does not know (registered by a newer one): failed, named.
    with factory() as s:
        crud.create_drafter(s, drafter_id="future", name="Future", kind="tomorrow", actor="test")
    sync.poll()
    assert engine_ids(runner) == set(DRAFTER_IDS)
    with factory() as s:
        row = crud.get_drafter(s, drafter_id="future")
        assert row is not None and row.status == "failed"
        assert "unknown drafter kind 'tomorrow'" in str(row.error)


def test_served_model_free_drafters_are_registered_and_kept(
    runner: EngineRunner, factory: sessionmaker[Session], pool_file: Path
) -> None:
    """A pool file's model-free entry becomes a ready row with its full parameters, and the
    pool sync's first pass keeps the member the engine built at start (same key)."""
    runner.call(lambda e: e.add_model_free("lookup", make_model_free("ngram", {"max_n": 4})))
    lookup = ServedDrafter("lookup", None, "Prompt lookup", kind="ngram", params={"max_n": 4})
    assert import_served_pool(factory, [*served(pool_file), lookup], target_model="tiny") == []
    with factory() as s:
        row = crud.get_drafter(s, drafter_id="lookup")
        assert row is not None
        assert (row.kind, row.params, row.status, row.name) == (
            "ngram", {**NGRAM_DEFAULTS, "max_n": 4}, "ready", "Prompt lookup")
    initial = {d.id: key for d in [*served(pool_file), lookup] if (key := d.key()) is not None}
    sync = PoolSync(runner, factory, resolve=lambda row: Path(row.local_path), initial=initial)
    member = runner.call(lambda e: e.snapshot.members["lookup"]).result(30)
    sync.poll()
    assert sync.status.changes == []  # nothing replaced
    assert runner.call(lambda e: e.snapshot.members["lookup"]).result(30) is member
    assert import_served_pool(factory, [lookup], target_model="tiny") == []  # idempotent
