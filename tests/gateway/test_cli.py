"""The `hedgespec` console script: drafter inspect exit codes, serve's start-up checks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gateway.cli.commands import main
from tests.gateway.tiny_pool import MODEL_NAME


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


def test_every_command_group_is_registered() -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0


def test_optional_command_modules_plug_in_when_present(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "extra_commands.py").write_text(
        "def register(sub):\n"
        "    p = sub.add_parser('hello')\n"
        "    p.set_defaults(handler=lambda args: 7)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(
        "gateway.cli.commands.OPTIONAL_COMMAND_MODULES", ("extra_commands", "no_such_pkg.cli")
    )
    assert main(["hello"]) == 7
