"""No import cycles: every module imports in a fresh interpreter, and the import graph has no loop.

The graph counts every `import` of a shard_pipeline module, at the top or inside a function
(a deferred import is still a dependency), so sub-packages keep one direction.
"""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[2] / "shard_pipeline"


def module_name(path: Path) -> str:
    parts = path.relative_to(PKG.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def all_modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PKG.rglob("*.py"))}


def imports_of(path: Path, modules: set[str]) -> set[str]:
    """The shard_pipeline modules `path` imports (a `from pkg import mod` names the module)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        else:
            continue
        found |= {n for n in names if n in modules}
    return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_import_graph_has_no_cycle():
    modules = all_modules()
    graph = {m: imports_of(p, set(modules)) - {m} for m, p in modules.items()}
    # `from shard_pipeline.run import registry` names the package too; a package's __init__
    # imports nothing of its children here, so only module-to-module edges matter
    graph = {m: {d for d in deps if modules[d].name != "__init__.py"} for m, deps in graph.items()}
    assert cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


@pytest.mark.slow
def test_every_module_imports_in_a_fresh_interpreter():
    names = [m for m in all_modules() if not m.endswith("__main__")]
    code = "import importlib, sys\nfor n in sys.argv[1:]:\n    importlib.import_module(n)\nprint(len(sys.argv) - 1)"
    p = subprocess.run([sys.executable, "-c", code, *names], capture_output=True, text=True, cwd=PKG.parent, timeout=300)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == str(len(names))


# The direction of the sub-packages: a module imports only its own layer or those before it.
LAYERS = {"": 0, "contract": 1, "input": 2, "run": 3, "stages": 4, "worker": 5, "submit": 6}


def layer(module: str) -> int:
    parts = module.split(".")
    return LAYERS.get(parts[1], 0) if len(parts) > 2 or (len(parts) == 2 and parts[1] in LAYERS) else 0


def test_sub_packages_import_in_one_direction():
    modules = all_modules()
    upward = [f"{m} -> {d}" for m, p in modules.items() for d in sorted(imports_of(p, set(modules)))
              if layer(d) > layer(m)]
    assert upward == []
