"""The project's import graph, read from the source: which module imports which (imports inside
functions included, and a module's own package, which runs first). Used by the layering test
and by the test of dvc.yaml's code dependencies."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def project_modules() -> dict[str, Path]:
    """Module name -> file, for arithrepro/ and stages/ (installed as arithrepro.stages)."""
    found = {}
    for base, package in ((ROOT / "arithrepro", "arithrepro"), (ROOT / "stages", "arithrepro.stages")):
        for path in base.rglob("*.py"):
            parts = list(path.relative_to(base).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join([package, *parts])] = path
    return found


def imports_of(path: Path, modules: dict) -> set[str]:
    """The project modules a file imports anywhere in it; `from a import b` names a.b when b is
    a module, else a. Importing a.b.c also runs the packages a.b and a."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules
                     else node.module for a in node.names]
        else:
            continue
        for name in names:
            while name:
                if name in modules:
                    out.add(name)
                name = name.rpartition(".")[0]
    return out


def graph() -> dict[str, set[str]]:
    modules = project_modules()
    edges = {name: imports_of(path, modules) for name, path in modules.items()}
    for name in modules:  # a module's package runs first
        parent = name.rpartition(".")[0]
        if parent in modules:
            edges[name].add(parent)
    for name in edges:
        edges[name].discard(name)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found
