"""The code map in docs/architecture.md names every module of healerd/, and only modules
that exist: a module added, moved or removed without the map fails here.

A module is named by its path from the repository's root (`healerd/core/planner.py`);
the short names in the heal path's prose (`controller.py`) do not count. A package's
`__init__.py` need not be named (most hold nothing but a docstring), but may be."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CODE_MAP = REPO / "docs" / "architecture.md"
MODULE = re.compile(r"\bhealerd/(?:[a-z_][a-z0-9_]*/)*[a-z_][a-z0-9_]*\.py\b")


def named(text: str) -> set[str]:
    return set(MODULE.findall(text))


def modules(root: Path = REPO) -> set[str]:
    return {
        path.relative_to(root).as_posix()
        for path in (root / "healerd").rglob("*.py")
        if path.name != "__init__.py"
    }


def test_every_module_named_in_the_code_map_exists() -> None:
    gone = sorted(
        m for m in named(CODE_MAP.read_text(encoding="utf-8")) if not (REPO / m).is_file()
    )
    assert not gone, f"docs/architecture.md names modules that do not exist: {gone}"


def test_every_module_of_every_package_is_named_in_the_code_map() -> None:
    missing = sorted(modules() - named(CODE_MAP.read_text(encoding="utf-8")))
    assert not missing, f"add these to the code map in docs/architecture.md: {missing}"


def test_the_reader_finds_paths_and_nothing_else(tmp_path: Path) -> None:
    text = (
        "`healerd/core/planner.py` (`plan`), healerd/engine/__init__.py, and in prose\n"
        "`controller.py`, `core/imagegc.py`, tests/unit/test_outcome.py, "
        "healerd/config/desired.pyc"
    )
    assert named(text) == {"healerd/core/planner.py", "healerd/engine/__init__.py"}
    (tmp_path / "healerd" / "core").mkdir(parents=True)
    for name in ("__init__.py", "planner.py", "new.py"):
        (tmp_path / "healerd" / "core" / name).write_text("")
    assert modules(tmp_path) == {"healerd/core/planner.py", "healerd/core/new.py"}
