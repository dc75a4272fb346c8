"""Enforce the import rules of DESIGN.md section 1 by parsing every module's imports.

Beyond section 1, dependencies between the top-level folders run one way: `bench` and `tests`
use `gateway`, never the reverse (`hedgespec bench` is a plugin the gateway finds through an
entry point, not an import), and `tests` use `bench.harness`, never the reverse. The gateway
imports its own modules by name: a dynamic import (`importlib.import_module`, `__import__`)
would hide a dependency from these rules, which is how gateway→bench went unseen. And the
gateway's wiring has one writer and one reader: only `gateway/app.py` touches `app.state` to
store the per-app objects and only `gateway/http/deps.py` to read them for routes.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

FORBIDDEN: dict[str, set[str]] = {
    "core": {
        "gateway", "drafter_registry", "fastapi", "starlette", "sse_starlette", "sqlalchemy",
        "alembic", "asyncio", "pydantic_settings", "uvicorn", "httpx", "migrations",
        "bench", "tests",
    },
    "drafter_registry": {
        "torch", "core", "gateway", "transformers", "safetensors", "fastapi", "bench", "tests",
    },
    "gateway": {"bench", "tests"},
    "bench": {"tests"},
}
NO_DYNAMIC_IMPORTS = ("gateway",)
DYNAMIC_IMPORTERS = {"import_module", "__import__"}
APP_STATE_USERS = {"gateway/app.py", "gateway/http/deps.py"}


def imported_roots(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    roots: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


def dynamic_imports(path: Path) -> list[int]:
    """Lines that call `import_module(...)` or `__import__(...)` (however they were imported)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if name in DYNAMIC_IMPORTERS:
                lines.append(node.lineno)
    return lines


def app_state_uses(path: Path) -> list[int]:
    """Lines that touch `<...>.app.state` or `app.state`."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == "state":
            owner = node.value
            name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", None)
            if name in ("app", "app_"):
                lines.append(node.lineno)
    return lines


def package_files(package: str) -> list[Path]:
    # bench/results holds outputs, not modules of the package.
    return sorted(p for p in (ROOT / package).rglob("*.py") if "results" not in p.parts)


def violations(files: Iterable[Path], forbidden: set[str]) -> list[str]:
    found = []
    for path in files:
        bad = imported_roots(path) & forbidden
        if bad:
            found.append(f"{path.name} imports {sorted(bad)}")
    return found


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_respects_import_rules(package: str) -> None:
    files = package_files(package)
    assert files, f"{package}/ has no modules"
    found = violations(files, FORBIDDEN[package])
    assert not found, "forbidden imports:\n" + "\n".join(found)


@pytest.mark.parametrize("package", NO_DYNAMIC_IMPORTS)
def test_package_imports_its_modules_by_name(package: str) -> None:
    found = [f"{p.relative_to(ROOT)}:{line}" for p in package_files(package)
             for line in dynamic_imports(p)]  # fmt: skip
    assert not found, "dynamic imports hide dependencies:\n" + "\n".join(found)


def test_only_the_app_factory_and_the_dependencies_touch_app_state() -> None:
    found = [f"{rel}:{line}" for p in package_files("gateway")
             if (rel := p.relative_to(ROOT).as_posix()) not in APP_STATE_USERS
             for line in app_state_uses(p)]  # fmt: skip
    assert not found, "read per-app objects through gateway.http.deps:\n" + "\n".join(found)


def test_checker_detects_a_violation(tmp_path: Path) -> None:
    bad = tmp_path / "m.py"
    bad.write_text("import os\nfrom sqlalchemy.orm import Session\nfrom . import x\n")
    assert imported_roots(bad) == {"os", "sqlalchemy"}


@pytest.mark.parametrize(
    ("package", "module"), [(p, m) for p in sorted(FORBIDDEN) for m in sorted(FORBIDDEN[p])]
)
def test_every_rule_catches_a_violating_file(tmp_path: Path, package: str, module: str) -> None:
    """Each forbidden edge, written the ways code really writes it, fails its package's rule."""
    for i, line in enumerate((f"import {module}.x", f"from {module}.x import y",
                              f"def f():\n    from {module} import y\n")):  # fmt: skip
        bad = tmp_path / f"bad{i}.py"
        bad.write_text(line + "\n")
        assert violations([bad], FORBIDDEN[package]) == [f"{bad.name} imports ['{module}']"]


def test_dynamic_imports_are_detected(tmp_path: Path) -> None:
    bad = tmp_path / "m.py"
    bad.write_text(
        "import importlib\nfrom importlib import import_module\n"
        "importlib.import_module('bench.cli')\nimport_module('x')\n__import__('y')\n"
        "from importlib.metadata import entry_points\nentry_points(group='g')\n"
    )
    assert dynamic_imports(bad) == [3, 4, 5]


def test_app_state_uses_are_detected(tmp_path: Path) -> None:
    bad = tmp_path / "m.py"
    bad.write_text(
        "def f(request, app):\n    a = request.app.state.runner\n    app.state.x = 1\n"
        "    return request.state.arrival\n"  # per-request state is not wiring
    )
    assert app_state_uses(bad) == [2, 3]
