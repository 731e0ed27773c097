"""The package's shape: stages import forward only, no import cycle, small modules and functions."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from tests.support.paths import ROOT

PACKAGE = ROOT / "exporter"
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 60
MAX_LEDGER_LINES = 300
LAYERS_CONTRACT = "the pipeline points forward: each layer imports only the layers below it"


# ------------------------------------------------------------------ the import graph

def modules(package: Path = PACKAGE) -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its ``__init__``)."""
    found = {}
    for path in package.rglob("*.py"):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _imported(name: str, path: Path, known: Mapping[str, Path]) -> Iterator[str]:
    """The modules of ours that ``name`` imports anywhere in its source (lazy imports too)."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                here = here[: len(here) - node.level + 1]
                base = ".".join([*here, *([node.module] if node.module else [])])
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base
                       for a in node.names]
        else:
            continue
        for dotted in targets:
            target = dotted
            while target and target not in known:
                target = target.rpartition(".")[0]
            # A module importing its own package's __init__ is not an edge back to it.
            if target and target != name and not name.startswith(target + "."):
                yield target


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Module → the modules of ours it imports."""
    known = modules(package)
    return {name: set(_imported(name, path, known)) for name, path in known.items()}


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            step = next(edges, None)
            if step is not None:
                if step not in index:
                    index[step] = low[step] = len(index)
                    stack.append(step)
                    on_stack.add(step)
                    work.append((step, iter(sorted(graph.get(step, ())))))
                elif step in on_stack:
                    low[node] = min(low[node], index[step])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_cycle_between_modules() -> None:
    """No two modules of exporter/ import each other, directly or through others."""
    assert cycles(import_graph()) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    """The check above can fail: a planted three-module circle and a self-contained tail."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(graph) == [["a", "b", "c"]]


# ------------------------------------------------------------------ the layers contract

def _layers() -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    contract = next(c for c in config["contracts"] if c["name"] == LAYERS_CONTRACT)
    return [part.strip() for layer in contract["layers"] for part in layer.split("|")]


def test_every_module_sits_in_a_layer() -> None:
    """The layers contract covers the whole package: no module is left outside every layer."""
    layers = _layers()
    outside = [name for name in modules() if name != "exporter"
               and not any(name == layer or name.startswith(layer + ".") for layer in layers)]
    assert outside == []


def _lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    """Run import-linter on the package under ``root`` with the project's contracts."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    # The console script's own entry point: importlinter.cli has no ``__main__`` guard.
    code = "import sys; from importlinter.cli import lint_imports_command as c; sys.exit(c())"
    return subprocess.run([sys.executable, "-c", code, "--no-cache"], cwd=root,
                          capture_output=True, text=True, check=False, env=env)


@pytest.mark.parametrize(("module", "back_edge"), [
    ("ingest/tail.py", "exporter.ledger.store"),
    ("ledger/slots.py", "exporter.projections.counting"),
    ("projections/figures.py", "exporter.report.summary"),
    ("report/summary.py", "exporter.serve.http"),
    ("serve/http.py", "exporter.cli.config"),
])
def test_a_backward_import_breaks_the_layers(tmp_path: Path, module: str, back_edge: str) -> None:
    """A copy of the package with one import pointing back up the pipeline fails the contract."""
    shutil.copytree(PACKAGE, tmp_path / "exporter", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    source = tmp_path / "exporter" / module
    source.write_text(source.read_text() + f"\nimport {back_edge}  # a deliberate back edge\n")
    proc = _lint_imports(tmp_path)
    assert proc.returncode != 0
    assert f"{LAYERS_CONTRACT} BROKEN" in proc.stdout
    importer = "exporter." + module.removesuffix(".py").replace("/", ".")
    assert f"{importer} -> {back_edge}" in proc.stdout


# ------------------------------------------------------------------ sizes

def test_no_module_over_the_limit() -> None:
    """Every module of exporter/ fits in MAX_MODULE_LINES lines."""
    sizes = {name: len(path.read_text().splitlines()) for name, path in modules().items()}
    assert {n: s for n, s in sizes.items() if s > MAX_MODULE_LINES} == {}


def test_no_function_over_the_limit() -> None:
    """Every function of exporter/ fits in MAX_FUNCTION_LINES lines (decorators aside)."""
    long = {}
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                size = (node.end_lineno or node.lineno) - node.lineno + 1
                if size > MAX_FUNCTION_LINES:
                    long[f"{name}.{node.name}"] = size
    assert long == {}


def test_the_ledger_class_is_a_small_facade() -> None:
    """``Ledger`` itself stays under MAX_LEDGER_LINES lines: its parts do the work."""
    tree = ast.parse((PACKAGE / "ledger" / "store.py").read_text())
    ledger = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Ledger")
    assert (ledger.end_lineno or ledger.lineno) - ledger.lineno + 1 < MAX_LEDGER_LINES


def test_no_test_module_imports_another_test_module() -> None:
    """Test modules share helpers only through tests/support/, never by importing a test module."""
    found = []
    for path in sorted([*(ROOT / "tests").glob("*.py"), *(ROOT / "bench").glob("*.py")]):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = "tests." * bool(node.level) + (node.module or "")
                names = [base] + [f"{base}.{alias.name}" for alias in node.names]
            else:
                continue
            if any(name.startswith("tests.test_") for name in names):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert found == []
