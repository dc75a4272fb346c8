"""Enforce the import rules of DESIGN.md section 1 by parsing every module's imports."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

FORBIDDEN: dict[str, set[str]] = {
    "core": {
        "gateway", "drafter_registry", "fastapi", "starlette", "sse_starlette", "sqlalchemy",
        "alembic", "asyncio", "pydantic_settings", "uvicorn", "httpx", "migrations",
    },
    "drafter_registry": {"torch", "core", "gateway", "transformers", "safetensors", "fastapi"},
}


def imported_roots(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    roots: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


def package_files(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_respects_import_rules(package: str) -> None:
    files = package_files(package)
    assert files, f"{package}/ has no modules"
    violations = []
    for path in files:
        bad = imported_roots(path) & FORBIDDEN[package]
        if bad:
            violations.append(f"{path.relative_to(ROOT)} imports {sorted(bad)}")
    assert not violations, "forbidden imports:\n" + "\n".join(violations)


def test_checker_detects_a_violation(tmp_path: Path) -> None:
    bad = tmp_path / "m.py"
    bad.write_text("import os\nfrom sqlalchemy.orm import Session\nfrom . import x\n")
    assert imported_roots(bad) == {"os", "sqlalchemy"}
