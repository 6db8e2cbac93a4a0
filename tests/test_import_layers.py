"""The layer rules of docs/architecture.md ("Layers"), checked statically: no import circles inside any package,
no upward import.

Layers, lowest first: diopi < torch_dipu < (op_tools, module_tools, dicp, dlinfer) < ditorch. The source is parsed, not
imported. Every import counts, at module level or inside a function, including
``importlib.import_module("<literal>")``; only imports under ``if TYPE_CHECKING:`` are left out, since
they never run.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
LAYER = {"diopi": 0, "torch_dipu": 1, "op_tools": 2, "module_tools": 2, "dicp": 2, "dlinfer": 2, "ditorch": 3}


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


FILES = {
    _module_name(p): p
    for p in sorted([*SRC.rglob("*.py"), *SRC.rglob("*.c")])  # a .c file is an extension module (setup.py)
    if (SRC / p.relative_to(SRC).parts[0] / "__init__.py").exists()
}


def _known(name: str) -> str:
    """The project module ``name`` refers to (an attribute path is cut back to its module)."""
    while name and name not in FILES:
        name = name.rpartition(".")[0]
    return name


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imported_names(module: str, node: ast.AST) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:
            package = module if FILES[module].name == "__init__.py" else module.rpartition(".")[0]
            for _ in range(node.level - 1):
                package = package.rpartition(".")[0]
            base = f"{package}.{base}" if base else package
        return [f"{base}.{a.name}" if f"{base}.{a.name}" in FILES else base for a in node.names]
    if (
        isinstance(node, ast.Call)
        and (getattr(node.func, "attr", None) or getattr(node.func, "id", None)) == "import_module"
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
    ):
        return [node.args[0].value]
    return []


def imports_of(module: str, source: str | None = None) -> set[str]:
    """The project modules ``module`` imports (TYPE_CHECKING blocks excluded); ``source`` replaces its file."""
    found: set[str] = set()
    if FILES[module].suffix == ".c":  # the C API's imports are not Python statements; ours import no project module
        return found

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        for name in _imported_names(module, node):
            if _known(name):
                found.add(_known(name))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(FILES[module].read_text() if source is None else source))
    found.discard(module)
    return found


def _package_modules(package: str) -> list[str]:
    return [m for m in FILES if m == package or m.startswith(package + ".")]


def find_cycles(package: str) -> list[list[str]]:
    """One path per back edge found by a depth-first walk of the package's own import graph."""
    modules = _package_modules(package)
    graph = {m: sorted(imports_of(m) & set(modules)) for m in modules}
    cycles: list[list[str]] = []
    done: set[str] = set()
    stack: list[str] = []

    def walk(module: str) -> None:
        stack.append(module)
        for target in graph[module]:
            if target in stack:
                cycles.append(stack[stack.index(target) :] + [target])
            elif target not in done:
                walk(target)
        stack.pop()
        done.add(module)

    for module in modules:
        if module not in done:
            walk(module)
    return cycles


def test_every_package_has_a_layer() -> None:
    packages = {p.name for p in SRC.iterdir() if (p / "__init__.py").exists()}
    assert packages == set(LAYER)


@pytest.mark.parametrize("package", list(LAYER))
def test_no_import_cycles(package: str) -> None:
    cycles = find_cycles(package)
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


@pytest.mark.parametrize("package", ["diopi", "torch_dipu", "op_tools", "module_tools", "dicp", "dlinfer"])
def test_no_import_of_a_higher_layer(package: str) -> None:
    upward = [
        f"{module} imports {target}"
        for module in _package_modules(package)
        for target in sorted(imports_of(module))
        if LAYER.get(target.partition(".")[0], -1) > LAYER[package]
    ]
    assert not upward, "\n".join(upward)


def test_checker_sees_every_import_that_runs() -> None:
    source = """
from typing import TYPE_CHECKING
from . import compare
from .env import env_flag
if TYPE_CHECKING:
    from diopi import case_format
def f():
    import torch_dipu.dispatch
    importlib.import_module("op_tools.engine")
"""
    assert imports_of("diopi.registry", source) == {
        "diopi.compare",
        "diopi.env",
        "torch_dipu.dispatch",
        "op_tools.engine",
    }


def test_no_module_imports_a_private_name_of_another_package() -> None:
    """``from other_package.mod import _name`` (or from a ``_private`` module of another package) couples a package
    to what another keeps for itself; a name shared across packages is public."""
    found = []
    for module, path in FILES.items():
        if path.suffix != ".py":
            continue
        own = module.partition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ImportFrom) or node.level or not node.module:
                continue
            if node.module.partition(".")[0] == own or node.module.partition(".")[0] not in LAYER:
                continue
            private_module = any(p.startswith("_") and not p.startswith("__") for p in node.module.split("."))
            found += [f"{module}: from {node.module} import {a.name}" for a in node.names
                      if private_module or (a.name.startswith("_") and not a.name.startswith("__"))]
    assert not found, "private names imported across packages:\n" + "\n".join(found)
