"""What the gateway reads from the served pool file, through core's typed loader: the drafters
it registers on start and the target downloaded drafters are checked against; `hedgespec serve`
refuses a bad pool file before the server starts."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from core.provision import smollm2
from demo.domains import DEMO_POOL
from gateway.cli import build_parser
from gateway.cli.serve import serve
from gateway.config import Settings
from gateway.pool.registry import ServedDrafter, served_drafters, served_target_dir


def settings_for(tmp_path: Path, pool: object) -> Settings:
    path = tmp_path / "pool.json"
    path.write_text(json.dumps(pool))
    return Settings(pool=path, database_url=f"sqlite:///{tmp_path / 'reg.db'}")


def test_the_served_drafters_come_from_the_pool_file(tmp_path: Path) -> None:
    settings = settings_for(tmp_path, {"target": "models/t", "drafters": [
        {"id": "a", "name": "Alpha", "domain": "code", "path": "drafters/a"},
        {"id": "b", "path": "drafters/b"},
        {"id": "lookup", "name": "Lookup", "kind": "ngram", "params": {"max_n": 4}}]})
    assert served_drafters(settings) == [
        ServedDrafter("a", (tmp_path / "drafters/a").resolve(), "Alpha", "code"),
        ServedDrafter("b", (tmp_path / "drafters/b").resolve(), "b"),
        ServedDrafter("lookup", None, "Lookup", None, "ngram", {"max_n": 4})]
    assert served_target_dir(settings) == (tmp_path / "models/t").resolve()


def test_the_demo_pools_target_is_the_provisioned_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HEDGESPEC_TARGET_CACHE", str(tmp_path / "cache"))
    settings = Settings(pool=DEMO_POOL, database_url=f"sqlite:///{tmp_path / 'reg.db'}")
    assert served_target_dir(settings) == (tmp_path / "cache" / smollm2.DIR_NAME).resolve()
    assert [d.id for d in served_drafters(settings)][-2:] == ["lookup", "suffix"]


def test_a_bad_pool_file_registers_nothing(tmp_path: Path) -> None:
    """The engine reports the bad file (`/ready`); the registry imports nothing from it."""
    settings = settings_for(tmp_path, {"target": "t", "drafters": [{"id": "a"}]})
    assert served_drafters(settings) == [] and served_target_dir(settings) is None


def test_serve_refuses_a_bad_pool_file_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pool = tmp_path / "pool.json"
    pool.write_text(json.dumps({"target": "t", "drafters": [{"id": "a", "kind": "medusa"}]}))
    args: argparse.Namespace = build_parser().parse_args(["serve", "--pool", str(pool)])
    assert serve(args) == 2
    err = capsys.readouterr().err
    assert str(pool) in err and "drafter 'a': unknown drafter kind 'medusa'" in err
