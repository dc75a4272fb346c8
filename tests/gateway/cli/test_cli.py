"""The `hedgespec` console script: drafter inspect exit codes, serve's start-up checks, and
commands other packages plug in through the `hedgespec.commands` entry-point group."""

from __future__ import annotations

import json
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

from bench.harness.tiny_pool import MODEL_NAME
from gateway.cli import main
from gateway.cli.commands import PLUGIN_GROUP


def inspect(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, object]]:
    code = main(["drafter", "inspect", *args])
    return code, json.loads(capsys.readouterr().out)


def test_inspect_compatible_drafter(pool_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = pool_file.parent
    code, report = inspect(
        capsys, str(root / "drafters"), "--target", str(root / MODEL_NAME), "--subfolder", "alpha"
    )
    assert code == 0 and report["compatible"] is True


def test_inspect_incompatible_target(
    pool_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = json.loads((pool_file.parent / MODEL_NAME / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "hidden_size": 128}))
    code, report = inspect(
        capsys, str(pool_file.parent / "drafters" / "beta"), "--target", str(tmp_path)
    )
    assert code == 1 and report["compatible"] is False and "hidden size" in str(report["reason"])


def test_inspect_unreadable_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, report = inspect(capsys, str(tmp_path / "missing"), "--target", str(tmp_path))
    assert code == 2 and report["readable"] is False


def test_serve_refuses_a_missing_pool(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--pool", str(tmp_path / "nope.json")]) == 2
    assert "pool file not found" in capsys.readouterr().err


def test_serve_without_a_model_says_how_to_name_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)  # no .env here
    monkeypatch.delenv("HEDGESPEC_POOL", raising=False)
    monkeypatch.delenv("HEDGESPEC_TARGET", raising=False)
    assert main(["serve"]) == 2
    err = capsys.readouterr().err
    assert "no model to serve: pass --pool FILE or --target DIR" in err and "make serve" in err


def test_every_command_group_is_registered() -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0


def test_bench_is_a_plugin_declared_by_the_installed_metadata(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`hedgespec bench` comes from pyproject's entry point, not from gateway importing bench."""
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", "--help"])
    assert exit_info.value.code == 0
    assert "HedgeSpec benchmark" in capsys.readouterr().out


def test_plugin_commands_plug_in_and_a_missing_one_is_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "extra_commands.py").write_text(
        "def register(sub):\n"
        "    p = sub.add_parser('hello')\n"
        "    p.set_defaults(handler=lambda args: 7)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    points = [
        EntryPoint("hello", "extra_commands:register", PLUGIN_GROUP),
        EntryPoint("gone", "no_such_pkg.cli:register", PLUGIN_GROUP),
    ]
    monkeypatch.setattr("gateway.cli.commands.entry_points", lambda group: points)
    assert main(["hello"]) == 7


def test_a_broken_plugin_is_not_silently_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "broken_commands.py").write_text("import no_such_dependency\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    points = [EntryPoint("broken", "broken_commands:register", PLUGIN_GROUP)]
    monkeypatch.setattr("gateway.cli.commands.entry_points", lambda group: points)
    with pytest.raises(ModuleNotFoundError, match="no_such_dependency"):
        main(["serve", "--help"])
