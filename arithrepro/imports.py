"""The project's import graph, read from the source without importing it: which module imports
which, counting imports inside functions and a module's own package (which runs first).
`arithrepro code-deps` follows it to the code each stage runs; the layering test reads it too."""

import ast
from pathlib import Path


def closure(edges: dict[str, set[str]], entry: str, follow=lambda module, target: True) -> set[str]:
    """The modules `entry` reaches, following an import only where follow(module, target)."""
    seen, todo = set(), [entry]
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        todo.extend(t for t in edges[module] if follow(module, t))
    return seen


def project_modules(root: Path) -> dict[str, Path]:
    """Module name -> file, for root/arithrepro and root/stages (installed as
    arithrepro.stages)."""
    root = Path(root)
    found = {}
    for base, package in ((root / "arithrepro", "arithrepro"),
                          (root / "stages", "arithrepro.stages")):
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


def graph(root: Path) -> dict[str, set[str]]:
    """Module -> the project modules it imports (anywhere in it), its own package included."""
    modules = project_modules(root)
    edges = {name: imports_of(path, modules) for name, path in modules.items()}
    for name in modules:  # a module's package runs first
        parent = name.rpartition(".")[0]
        if parent in modules:
            edges[name].add(parent)
    for name in edges:
        edges[name].discard(name)
    return edges
