"""The test suite's own layout: no test module imports another test module (shared helpers live
in tests/helpers.py, shared fixtures in tests/conftest.py), so that running one test file never
depends on another one's contents."""

import ast
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
TEST_MODULES = {path.stem for path in TESTS.glob("test_*.py")}


def imported_test_modules(source: str) -> set[str]:
    """The test modules `source` imports anywhere in it, in any spelling: `import tests.test_x`,
    `from tests.test_x import y`, `from tests import test_x`, and the relative `from .test_x
    import y` and `from . import test_x`."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            # the module itself and each imported name under it: a name may be a module
            base = node.module or ""
            names = [base, *(f"{base}.{alias.name}".lstrip(".") for alias in node.names)]
        else:
            continue
        for name in names:
            first = name.removeprefix("tests.").split(".")[0]
            if first in TEST_MODULES:
                found.add(first)
    return found


def test_no_test_module_imports_another():
    found = {(path.stem, imported) for path in sorted(TESTS.glob("test_*.py"))
             for imported in imported_test_modules(path.read_text())}
    assert not found, f"test modules importing test modules: {sorted(found)}"


@pytest.mark.parametrize("source", [
    "import tests.test_models",
    "from tests.test_models import build",
    "from tests import test_models",
    "from .test_models import build",
    "from . import test_models",
    "def f():\n    from tests.test_models import build",
])
def test_every_spelling_of_an_import_is_found(source):
    assert imported_test_modules(source) == {"test_models"}


def test_helpers_and_other_packages_are_not_test_modules():
    source = "from tests.helpers import build\nfrom tests import conftest\nimport torch.testing"
    assert imported_test_modules(source) == set()
