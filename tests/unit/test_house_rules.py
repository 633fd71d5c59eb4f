"""House rules for the tests themselves (issue 30, point 4): no module under tests/ or
bench/ imports a test module (`test_*`) or a conftest. A helper that two test modules
share lives in a harness (tests/unit/harness/, tests/integration/harness.py,
tests/contract/); a conftest's fixtures reach tests as fixtures, never by import."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CHECKED = ("tests", "bench")


def imported_modules(node: ast.AST) -> Iterator[str]:
    """Every module an import statement names, including `from pkg import module`."""
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom) and node.module is not None:
        yield node.module
        yield from (f"{node.module}.{alias.name}" for alias in node.names)
    elif isinstance(node, ast.ImportFrom):  # `from . import test_x`
        yield from (alias.name for alias in node.names)


def forbidden(module: str) -> bool:
    last = module.rsplit(".", 1)[-1]
    return last.startswith("test_") or last == "conftest"


def violations(root: Path) -> list[str]:
    found = []
    for top in CHECKED:
        for path in sorted((root / top).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
            for node in ast.walk(tree):
                bad = sorted({m for m in imported_modules(node) if forbidden(m)})
                if bad:
                    where = path.relative_to(root)
                    line = getattr(node, "lineno", 0)
                    found.append(f"{where}:{line}: imports {', '.join(bad)}")
    return found


def test_no_module_imports_a_test_module_or_a_conftest() -> None:
    found = violations(REPO)
    assert not found, (
        "a test module or conftest is imported (move the shared helper into a harness: "
        "tests/unit/harness/, tests/integration/harness.py, tests/contract/):\n" + "\n".join(found)
    )


def test_the_rule_sees_each_form_of_import(tmp_path: Path) -> None:
    (tmp_path / "bench").mkdir()
    (tmp_path / "tests" / "unit").mkdir(parents=True)
    (tmp_path / "tests" / "unit" / "test_a.py").write_text(
        "import tests.unit.test_b\n"
        "from tests.unit.test_c import helper\n"
        "from tests.unit import test_d\n"
        "from tests.integration.conftest import IMAGE\n"
        "from tests.unit.harness.loop import drive\n"
        "def f() -> None:\n"
        "    from . import conftest\n"
    )
    assert violations(tmp_path) == [
        "tests/unit/test_a.py:1: imports tests.unit.test_b",
        "tests/unit/test_a.py:2: imports tests.unit.test_c",
        "tests/unit/test_a.py:3: imports tests.unit.test_d",
        "tests/unit/test_a.py:4: imports tests.integration.conftest",
        "tests/unit/test_a.py:7: imports conftest",
    ]
