"""The loop's shape (issue 30): small parts, each built in one place.

Every class of the loop has at most 15 methods; a loop module stays under 450 lines;
the 60-line gate holds without `# fmt: skip`; and only the composition root
(healerd.core.wiring.build_loop) constructs a part, so the daemon and the tests run the
loop wired the same way."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CORE = REPO / "healerd" / "core"
LOOP = [
    "controller",
    "dispatch",
    "inputs",
    "looks",
    "loopmemory",
    "loopsettings",
    "reads",
    "shown",
    "wanted",
    "wiring",
]
PARTS = {"Controller", "Dispatcher", "Inputs", "Looks", "Reads", "Shown", "LoopParts"}


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


def test_no_class_of_the_loop_has_more_than_15_methods() -> None:
    counts = {
        f"{name}.{node.name}": sum(
            isinstance(d, ast.FunctionDef | ast.AsyncFunctionDef) for d in node.body
        )
        for name in LOOP
        for node in _tree(CORE / f"{name}.py").body
        if isinstance(node, ast.ClassDef)
    }
    assert counts and not {k: n for k, n in counts.items() if n > 15}, counts


def test_loop_modules_stay_small() -> None:
    sizes = {n: len((CORE / f"{n}.py").read_text(encoding="utf-8").splitlines()) for n in LOOP}
    assert not {n: s for n, s in sizes.items() if s > 450}, sizes


def test_no_fmt_skip_in_core_or_the_daemon_main() -> None:
    files = [*CORE.glob("*.py"), REPO / "healerd" / "daemon" / "main.py"]
    marker = "fmt: " + "skip"
    assert not [f.name for f in files if marker in f.read_text(encoding="utf-8")]


def test_only_the_composition_root_builds_the_parts_of_the_loop() -> None:
    builders = []
    for root in ("healerd", "tests", "bench"):
        for path in (REPO / root).rglob("*.py"):
            if path == CORE / "wiring.py":
                continue
            for node in ast.walk(_tree(path)):
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Name)
                    and node.func.id in PARTS
                ):
                    builders.append(f"{path.relative_to(REPO)}:{node.lineno} {node.func.id}")
    assert not builders, builders
