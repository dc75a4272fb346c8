"""The pool file (core/pool_file.py): parsed into typed values once, every mistake named with its
file and field, written back exactly as the demo build lays it out."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from core.pool_file import (
    PoolDrafter,
    PoolFile,
    PoolFileError,
    ProvisionedTarget,
    TargetDir,
    load_pool_file,
    pool_file_json,
    write_pool_file,
)
from core.provision import smollm2

SHIPPED = Path(__file__).resolve().parents[2] / "demo" / "pool" / "pool.json"


def write(tmp_path: Path, content: Any) -> Path:
    path = tmp_path / "pool.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return path


def test_the_shipped_demo_pool_reads_into_typed_values() -> None:
    pool = load_pool_file(SHIPPED)
    base = SHIPPED.parent
    assert pool.target == ProvisionedTarget(smollm2.NAME)
    assert pool.model_name == "SmolLM2-135M-Instruct"
    assert pool.generation_config == {"temperature": 0.2, "top_p": 0.9}
    assert pool.router == base / "router.npz"
    assert pool.drafters[0] == PoolDrafter("generalist", path=base / "drafters/generalist",
                                           domain="all")
    assert [d.id for d in pool.eagle3] == [d.id for d in pool.drafters[:8]]
    assert pool.drafters[-2:] == (PoolDrafter("lookup", kind="ngram"),
                                  PoolDrafter("suffix", kind="suffix"))


def test_writing_the_shipped_pool_reproduces_its_bytes(tmp_path: Path) -> None:
    """The writer the demo build uses: same keys, same order, paths relative to the file."""
    copy = replace(load_pool_file(SHIPPED), path=tmp_path / "pool.json")
    copy = replace(copy, router=tmp_path / "router.npz", drafters=tuple(
        replace(d, path=tmp_path / d.path.relative_to(SHIPPED.parent)) if d.path else d
        for d in copy.drafters))
    write_pool_file(copy)
    assert (tmp_path / "pool.json").read_bytes() == SHIPPED.read_bytes()


def test_relative_paths_follow_the_file_and_absolute_ones_stay(tmp_path: Path) -> None:
    elsewhere = Path("/srv/drafters")  # outside the pool file's folder: written back absolute
    path = write(tmp_path, {"_comment": "a note", "target": "models/t", "drafters": [
        {"id": "a", "name": "Alpha", "domain": "code", "path": "drafters/a", "_comment": "x"},
        {"id": "b", "path": str(elsewhere / "b")},
        {"id": "lookup", "kind": "ngram", "params": {"max_n": 4}}]})
    pool = load_pool_file(path)
    assert pool == PoolFile(path=path, target=TargetDir(tmp_path / "models/t"), drafters=(
        PoolDrafter("a", path=tmp_path / "drafters/a", domain="code", name="Alpha"),
        PoolDrafter("b", path=elsewhere / "b"),
        PoolDrafter("lookup", kind="ngram", params={"max_n": 4})))
    assert pool.target.directory() == tmp_path / "models/t"
    assert pool_file_json(pool) == {"target": "models/t", "drafters": [
        {"id": "a", "name": "Alpha", "domain": "code", "path": "drafters/a"},
        {"id": "b", "path": str(elsewhere / "b")},
        {"id": "lookup", "kind": "ngram", "params": {"max_n": 4}}]}


def test_a_provisioned_target_is_located_without_converting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HEDGESPEC_TARGET_CACHE", str(tmp_path / "cache"))
    pool = load_pool_file(write(tmp_path, {"target": {"provision": smollm2.NAME}}))
    assert pool.drafters == ()
    assert pool.target.directory(provision=False) == tmp_path / "cache" / smollm2.DIR_NAME
    assert not (tmp_path / "cache").exists()


@pytest.mark.parametrize(("content", "message"), [
    ("{", "cannot read pool file"),
    ([], "the file: expected an object"),
    ({"drafters": []}, "'target' is required"),
    ({"target": "t", "drafter": []}, r"unknown keys \['drafter'\]"),
    ({"target": {"provision": "gpt-5"}}, "target {'provision': 'gpt-5'}: expected a model "
                                         "directory"),
    ({"target": ""}, "expected a model directory"),
    ({"target": "t", "drafters": {}}, "drafters: expected a list"),
    ({"target": "t", "drafters": [{"path": "d"}]}, r"drafters\[0\]: 'id' is required"),
    ({"target": "t", "drafters": [{"id": "a"}]}, "drafter 'a': an EAGLE-3 drafter needs 'path'"),
    ({"target": "t", "drafters": [{"id": "a", "path": "d", "params": {}}]},
     "'params' belong to a model-free kind"),
    ({"target": "t", "drafters": [{"id": "a", "kind": "ngram", "path": "d"}]},
     "has no weights"),
    ({"target": "t", "drafters": [{"id": "a", "kind": "medusa"}]},
     "drafter 'a': unknown drafter kind 'medusa'"),
    ({"target": "t", "drafters": [{"id": "a", "kind": "ngram", "params": {"max_n": "4"}}]},
     "must be an integer"),
    ({"target": "t", "drafters": [{"id": "a", "kind": "ngram", "params": {"max_n": 99}}]},
     "max_n must be <= 16"),
    ({"target": "t", "drafters": [{"id": "a", "path": "x"}, {"id": "a", "kind": "ngram"}]},
     r"duplicate drafter ids \['a'\]"),
    ({"target": "t", "drafters": [{"id": "a", "path": 3}]}, "'path' must be a string"),
    ({"target": "t", "generation_config": {"top_p": 2}}, "generation_config: top_p=2 is out"),
    ({"target": "t", "generation_config": {"seed": 1}}, "unknown sampling keys"),
    ({"target": "t", "model_name": 7}, "'model_name' must be a string"),
    # a seed pool (pools/*.json) handed over as a pool file: named as the other dialect
    ({"target": "meta-llama/Llama-3.1-8B-Instruct", "drafters": [
        {"discover": {"repo_id": "aladinggit/hedgespec_eagle_drafters"}}]}, "that is a seed pool"),
    ({"target": "t", "drafters": [{"id": "a", "name": "A", "source": "local", "path": "d"}]},
     "--seed-pool"),
])
def test_a_bad_pool_file_is_refused_naming_the_file_and_field(
    tmp_path: Path, content: Any, message: str
) -> None:
    path = write(tmp_path, content)
    with pytest.raises(PoolFileError, match=message) as info:
        load_pool_file(path)
    assert str(path) in str(info.value)


def test_the_error_is_a_value_error_before_any_weights_load(tmp_path: Path) -> None:
    """`SpecEngine.from_pool_file` reads through the loader: a bad file never reaches a load."""
    from core.config import EngineConfig
    from core.engine import SpecEngine

    path = write(tmp_path, {"target": "missing-model", "generation_config": {"top_k": -1}})
    with pytest.raises(ValueError, match="generation_config: top_k"):
        SpecEngine.from_pool_file(path, EngineConfig())
