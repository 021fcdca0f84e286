"""The package's layers: no module imports, directly or through others, a module that imports
it back (counting imports inside functions, and a package's own __init__), and the schema
combinators import nothing of the project."""

from pathlib import Path

from arithrepro.imports import graph as read_graph
from arithrepro.imports import imports_of

ROOT = Path(__file__).resolve().parents[1]


def graph() -> dict[str, set[str]]:
    return read_graph(ROOT)


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


def test_no_module_imports_itself_back():
    assert cycles(graph()) == []


def test_the_cycle_finder_finds_a_cycle():
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(edges) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_a_package_that_imports_its_modules_is_a_cycle(tmp_path):
    """The shape the old registries had: a package __init__ importing a module that imports
    the package's other modules."""
    modules = {"p": tmp_path / "p.py", "p.m": tmp_path / "m.py"}
    modules["p"].write_text("from p import m\n")
    modules["p.m"].write_text("import os\n")
    edges = {name: imports_of(path, modules) for name, path in modules.items()}
    edges["p.m"].add("p")
    assert cycles(edges) == [["p", "p.m"]]


def test_the_schema_combinators_are_a_leaf():
    edges = graph()
    assert edges["arithrepro.schema"] == {"arithrepro"}
    assert edges["arithrepro"] == set()


def test_the_library_does_not_import_the_stages():
    edges = graph()
    library = [m for m in edges if not m.startswith("arithrepro.stages") and m != "arithrepro.cli"]
    assert [m for m in library if any(e.startswith("arithrepro.stages") for e in edges[m])] == []


def test_stages_do_not_import_each_other():
    edges = graph()
    stages = [m for m in edges if m.startswith("arithrepro.stages.")]
    allowed = {"arithrepro.stages", "arithrepro.stages.common"}
    reach = {m: sorted(e for e in edges[m] if e.startswith("arithrepro.stages") and e not in allowed)
             for m in stages}
    assert {m: r for m, r in reach.items() if r} == {}


def test_every_package_is_one_the_distribution_ships():
    """pyproject.toml lists its packages by name: a package missing there imports from a
    checkout (an editable install) and is absent from a built wheel."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    where = {name: ROOT / path for name, path in project["package-dir"].items()}
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "arithrepro").rglob("__init__.py")}
    found |= {name for name, path in where.items() if (path / "__init__.py").is_file()}
    assert set(project["packages"]) == found
