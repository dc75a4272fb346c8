"""Enforce the import rules of DESIGN.md section 1 by parsing every module's imports.

Beyond section 1, dependencies between the top-level folders run one way: `bench` and `tests`
use `gateway`, never the reverse (`hedgespec bench` is a plugin the gateway finds through an
entry point, not an import), and `tests` use `bench.harness`, never the reverse. `demo` builds
the demo pool with the product and the product never imports it, not even inside a function:
the pool file and its target's provisioning live in `core` (`core/pool_file.py`,
`core/provision/`), and `hedgespec demo` is a plugin like `hedgespec bench`. The gateway
imports its own modules by name: a dynamic import (`importlib.import_module`, `__import__`)
would hide a dependency from these rules, which is how gateway→bench went unseen. And the
gateway's wiring has one writer and one reader: only `gateway/app.py` touches `app.state` to
store the per-app objects and only `gateway/http/deps.py` to read them for routes. Inside the
gateway, imports run down its layers only (`GATEWAY_LAYERS`, written out in `gateway/__init__.py`);
inside `core`, down its rooms (`CORE_LAYERS`: each room's `__init__` says what it may import),
and the rooms of one floor do not import each other. The modules of `core`, `bench` and `demo`
import each other without a cycle, counting imports inside functions. The gateway reaches `core`
only through its face, `core/api.py` (`CORE_FACE`), which imports no torch.

The EAGLE-3 checkpoint format's rules (`eagle3_format/`) are a top-level package that both
`core` and `drafter_registry` import, so the loader and the registry's checks state them once
while the registry still imports nothing of `core` (section 1): it imports only the standard
library and itself, and importing every registry module loads no torch and no `core`.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

FORBIDDEN: dict[str, set[str]] = {
    "core": {
        "gateway", "drafter_registry", "fastapi", "starlette", "sse_starlette", "sqlalchemy",
        "alembic", "asyncio", "pydantic_settings", "uvicorn", "httpx", "migrations",
        "bench", "demo", "tests",
    },
    "drafter_registry": {
        "torch", "core", "gateway", "transformers", "safetensors", "fastapi", "bench", "demo",
        "tests",
    },
    "gateway": {"bench", "demo", "tests"},
    "bench": {"tests"},
    "eagle3_format": {
        "torch", "transformers", "safetensors", "numpy", "core", "drafter_registry", "gateway",
        "sqlalchemy", "fastapi", "bench", "demo", "tests",
    },
}
SHARED_FORMAT = "eagle3_format"
NO_DYNAMIC_IMPORTS = ("gateway",)
DYNAMIC_IMPORTERS = {"import_module", "__import__"}
APP_STATE_USERS = {"gateway/app.py", "gateway/http/deps.py"}
# The gateway's layers, lowest first, by the name directly under `gateway/` (`__init__` is the
# package's docstring): a module may import its own layer and those below, never one above.
GATEWAY_LAYERS: tuple[frozenset[str], ...] = (
    frozenset({"__init__", "config", "errors", "metrics"}),
    frozenset({"live"}),
    frozenset({"runner"}),
    frozenset({"openai", "pool"}),
    frozenset({"http"}),
    frozenset({"app", "cli", "__main__"}),
)
LAYER_OF = {unit: rank for rank, layer in enumerate(GATEWAY_LAYERS) for unit in layer}
# core's rooms, lowest first, by the name directly under `core/` (`config.py` is unit "config").
# A module imports its own room and the floors below; rooms of one floor import each other only
# on the floors in CORE_OPEN_FLOORS (the base's leaf modules, and the engine with its pool-file
# loader on top).
CORE_LAYERS: tuple[frozenset[str], ...] = (
    frozenset({"__init__", "config", "errors", "stats", "round_output", "served_facts"}),
    frozenset({"model", "selection", "provision"}),
    frozenset({"speculation"}),
    frozenset({"decoding"}),
    frozenset({"batching"}),
    frozenset({"engine", "pool_file", "api"}),
)
CORE_OPEN_FLOORS = {0, len(CORE_LAYERS) - 1}
CORE_FLOOR_OF = {unit: rank for rank, layer in enumerate(CORE_LAYERS) for unit in layer}
# What the gateway may import of core: this module only, so that what core offers a front end is
# stated in one place and core's rooms can change behind it.
CORE_FACE = "core.api"


def imported_modules(path: Path) -> set[str]:
    """Dotted names a module imports absolutely; `from a.b import c` counts as `a.b.c`, since c
    may be a module (`from core import eagle3` imports core.model.eagle3)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def imported_roots(path: Path) -> set[str]:
    return {name.split(".")[0] for name in imported_modules(path)}


def within(name: str, packages: Iterable[str]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in packages)


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


def gateway_units(path: Path, package: Sequence[str]) -> set[str]:
    """The names directly under `gateway/` (`runner`, `http`, ...) that a module imports.
    Relative imports resolve against `package`, the module's package (`("gateway", "openai")`);
    the top-level package is `package[0]` (`core` for core's rooms)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    units: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name.split(".") for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = list(package[: len(package) - node.level + 1]) if node.level else []
            module = base + (node.module.split(".") if node.module else [])
            # `from gateway import runner` names the unit among the imported names.
            top = [package[0]]
            targets = [module + [a.name] for a in node.names] if module == top else [module]
        else:
            continue
        units.update(t[1] for t in targets if len(t) > 1 and t[0] == package[0])
    return units


def upward_imports(path: Path, module: Sequence[str]) -> list[str]:
    """The units of a higher layer that `module` (`("gateway", "openai", "serving")`, an
    `__init__` kept as its last part) imports; a unit in no layer counts as higher."""
    rank = LAYER_OF[module[1]]
    top = len(GATEWAY_LAYERS)
    return sorted(u for u in gateway_units(path, module[:-1]) if LAYER_OF.get(u, top) > rank)


def core_unit(module: Sequence[str]) -> str:
    """A core module's room: the name directly under `core/` (a base module is its own)."""
    return module[1] if len(module) > 2 else module[-1]


def core_upward_imports(path: Path, module: Sequence[str]) -> list[str]:
    """The rooms `module` (`("core", "decoding", "request")`) may not import: those on a higher
    floor, and the other rooms of its own floor unless that floor is open."""
    unit = core_unit(module)
    rank = CORE_FLOOR_OF[unit]
    top = len(CORE_LAYERS)

    def barred(other: str) -> bool:
        floor = CORE_FLOOR_OF.get(other, top)
        return floor > rank or (floor == rank and other != unit and rank not in CORE_OPEN_FLOORS)

    return sorted(u for u in gateway_units(path, module[:-1]) if barred(u))


def module_parts(path: Path) -> tuple[str, ...]:
    return path.relative_to(ROOT).with_suffix("").parts


def package_files(package: str, root: Path = ROOT) -> list[Path]:
    # bench/results holds outputs, not modules of the package.
    return sorted(p for p in (root / package).rglob("*.py") if "results" not in p.parts)


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


def test_the_shared_checkpoint_format_imports_only_the_standard_library() -> None:
    """What core and the registry share brings nothing else with it: no relative imports, no
    third-party module, no module of another package."""
    files = package_files(SHARED_FORMAT)
    found = []
    for path in files:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        if any(isinstance(node, ast.ImportFrom) and node.level for node in ast.walk(tree)):
            found.append(f"{path.relative_to(ROOT)} imports relatively")
        found += [f"{path.relative_to(ROOT)} imports {name}"
                  for name in sorted(imported_modules(path))
                  if not within(name, (SHARED_FORMAT,))
                  and name.split(".")[0] not in sys.stdlib_module_names]  # fmt: skip
    assert not found, "\n".join(found)


def imports_past_the_face(path: Path) -> list[str]:
    """The modules of `core` that `path` imports other than through `CORE_FACE` (a bare
    `import core` counts: it would reach the rooms by attribute)."""
    return sorted(name for name in imported_modules(path)
                  if within(name, ("core",)) and not within(name, (CORE_FACE,)))


def test_the_gateway_imports_core_only_through_its_face() -> None:
    found = [f"{p.relative_to(ROOT)} imports {bad}" for p in package_files("gateway")
             if (bad := imports_past_the_face(p))]  # fmt: skip
    assert not found, f"import these through {CORE_FACE}:\n" + "\n".join(found)


def test_the_face_rule_catches_an_import_past_it(tmp_path: Path) -> None:
    """A gateway module importing a room of core, however written (inside a function or for
    annotations only included), fails the rule; the face itself passes."""
    for i, line in enumerate(("from core.engine import SpecEngine", "import core.engine",
                              "from core import engine", "import core",
                              "from core.speculation.grammar import grammar_text",
                              "def f():\n    from core.model.eagle3 import DrafterLoadError\n",
                              "if TYPE_CHECKING:\n    from core.engine import RoundOutput\n")):
        bad = tmp_path / f"bad{i}.py"
        bad.write_text(line + "\n")
        assert imports_past_the_face(bad), line
    ok = tmp_path / "ok.py"
    ok.write_text("from core.api import SpecEngine\nimport core.api\nfrom core import api\n"
                  "import os\nfrom gateway.runner import Engine\n")
    assert imports_past_the_face(ok) == []


def test_importing_the_face_of_core_loads_no_torch() -> None:
    """The gateway's modules that read data or format text import core's face at start, so
    the face defers what needs torch to when it is called."""
    code = ("import sys\nimport core.api\nprint(sorted(m for m in sys.modules if m.split('.')[0]"
            " in ('torch', 'transformers', 'safetensors')))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         check=True, timeout=120)
    assert out.stdout.strip() == "[]", out.stdout


def test_importing_the_registry_loads_no_torch() -> None:
    modules = [".".join(parts[:-1] if parts[-1] == "__init__" else parts)
               for parts in map(module_parts, package_files("drafter_registry"))]
    code = (f"import sys\nfor m in {modules!r}: __import__(m)\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('torch', 'transformers', 'safetensors', 'core')))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         check=True, timeout=120)
    assert out.stdout.strip() == "[]", out.stdout


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


def test_every_gateway_module_has_a_layer() -> None:
    units = {module_parts(p)[1] for p in package_files("gateway")}
    assert units == set(LAYER_OF), "place every name under gateway/ in exactly one layer"


def test_gateway_imports_run_down_its_layers() -> None:
    found = [f"{p.relative_to(ROOT)} imports {bad}" for p in package_files("gateway")
             if (bad := upward_imports(p, module_parts(p)))]  # fmt: skip
    assert not found, "imports from a lower gateway layer to a higher one:\n" + "\n".join(found)


def test_every_core_module_has_a_room() -> None:
    units = {core_unit(module_parts(p)) for p in package_files("core")}
    assert units == set(CORE_FLOOR_OF), "place every name under core/ in exactly one room"


def test_core_imports_run_down_its_rooms() -> None:
    found = [f"{p.relative_to(ROOT)} imports {bad}" for p in package_files("core")
             if (bad := core_upward_imports(p, module_parts(p)))]  # fmt: skip
    assert not found, "imports from a lower room of core to a higher one:\n" + "\n".join(found)


def import_graph(package: str, root: Path = ROOT) -> dict[str, set[str]]:
    """Each module of `package` (under `root`) by dotted name -> the modules of the package it
    imports, at module level or inside a function (a package counts as its `__init__`;
    `from core.x import y` as core.x.y when y is a module, else as core.x)."""
    files = {".".join(p.relative_to(root).with_suffix("").parts).removesuffix(".__init__"): p
             for p in package_files(package, root)}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        targets = set()
        for imported in imported_modules(path):
            while imported and imported not in files:
                imported = imported.rpartition(".")[0]
            if imported and imported != name:
                targets.add(imported)
        graph[name] = targets
    return graph


def cycle_in(graph: dict[str, set[str]]) -> list[str]:
    """One import cycle of `graph` (its modules in order, the first repeated), or []."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        state[node] = 2
        path.pop()
        return []

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return []


# Packages whose modules import each other without a cycle. In bench/ and demo/ a cycle used to
# be broken at run time by importing inside a function; the graph counts those imports too, so
# what two modules share lives in a third that both import.
ACYCLIC = ("bench", "core", "demo")


@pytest.mark.parametrize("package", ACYCLIC)
def test_package_has_no_import_cycle(package: str) -> None:
    assert cycle_in(import_graph(package)) == []


def test_the_import_graph_counts_imports_inside_functions(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "a.py").write_text("from pkg.b import f\n")
    (tmp_path / "pkg" / "b.py").write_text("def f():\n    from pkg import a\n    return a\n")
    (tmp_path / "pkg" / "c.py").write_text("import pkg.a\n")
    graph = import_graph("pkg", tmp_path)
    assert graph == {"pkg": set(), "pkg.a": {"pkg.b"}, "pkg.b": {"pkg.a"}, "pkg.c": {"pkg.a"}}
    assert cycle_in(graph) == ["pkg.a", "pkg.b", "pkg.a"]


def test_the_cycle_check_finds_a_cycle() -> None:
    graph = {"core.a": {"core.b"}, "core.b": {"core.c"}, "core.c": {"core.a"}, "core.d": set()}
    assert cycle_in(graph) == ["core.a", "core.b", "core.c", "core.a"]
    assert cycle_in({"core.a": {"core.b"}, "core.b": set()}) == []


def test_every_core_room_says_what_it_may_import() -> None:
    rooms = [u for u in CORE_FLOOR_OF if (ROOT / "core" / u).is_dir()]
    assert rooms
    for room in rooms:
        doc = ast.get_docstring(ast.parse((ROOT / "core" / room / "__init__.py").read_text()))
        assert doc and "import" in doc, f"core/{room}/__init__.py: say what the room may import"


# Each room paired with a room of the floor just above it, and each room of a closed floor with
# its neighbours there.
CORE_BARRED = ([(u, min(CORE_LAYERS[rank + 1])) for u, rank in sorted(CORE_FLOOR_OF.items())
                if rank + 1 < len(CORE_LAYERS)]
               + [(u, v) for rank, layer in enumerate(CORE_LAYERS) if rank not in CORE_OPEN_FLOORS
                  for u in sorted(layer) for v in sorted(layer) if u != v])  # fmt: skip


@pytest.mark.parametrize(("unit", "barred"), CORE_BARRED)
def test_the_room_rule_catches_a_barred_import(tmp_path: Path, unit: str, barred: str) -> None:
    """A module of each room importing a room above it (or a neighbour on a closed floor),
    however written, fails the rule; its own room and the floors below pass."""
    module = ("core", unit, "m") if unit not in CORE_LAYERS[0] else ("core", unit)
    for i, line in enumerate((f"import core.{barred}.x", f"from core.{barred}.x import y",
                              f"from core import {barred}",
                              f"def f():\n    from core.{barred} import y\n")):  # fmt: skip
        bad = tmp_path / f"bad{i}.py"
        bad.write_text(line + "\n")
        assert core_upward_imports(bad, module) == [barred]
    below = [u for u, rank in CORE_FLOOR_OF.items() if rank < CORE_FLOOR_OF[unit]]
    ok = tmp_path / "ok.py"
    ok.write_text("".join(f"from core.{u} import x\n" for u in [*below, unit]) + "import os\n")
    assert core_upward_imports(ok, module) == []


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


# Each unit paired with a unit of the layer just above it (the top layer has none).
ONE_LAYER_UP = [(u, min(GATEWAY_LAYERS[rank + 1])) for u, rank in sorted(LAYER_OF.items())
                if rank + 1 < len(GATEWAY_LAYERS)]  # fmt: skip


@pytest.mark.parametrize(("unit", "above"), ONE_LAYER_UP)
def test_the_layer_rule_catches_an_upward_import(tmp_path: Path, unit: str, above: str) -> None:
    """A module of each layer importing the layer above, however written, fails the rule; its
    own layer and the layers below pass."""
    module = ("gateway", unit, "m")
    for i, line in enumerate((f"import gateway.{above}.x", f"from gateway.{above}.x import y",
                              f"from gateway import {above}", f"from .. import {above}",
                              f"from ..{above}.x import y",
                              f"def f():\n    from gateway.{above} import y\n")):  # fmt: skip
        bad = tmp_path / f"bad{i}.py"
        bad.write_text(line + "\n")
        assert upward_imports(bad, module) == [above]
    below = [u for u, rank in LAYER_OF.items() if rank <= LAYER_OF[unit]]
    ok = tmp_path / "ok.py"
    ok.write_text("".join(f"from gateway.{u} import x\nfrom .. import {u}\n" for u in below)
                  + "from . import sibling\nimport os\n")  # fmt: skip
    assert upward_imports(ok, module) == []


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
